// The RoPE kernel: one thread per work item, where an item is V consecutive channels of the first
// half of the rotation together with their V partners in the second half (a "pair chunk"), or V
// pass-through channels. Items run q's rows then k's; within a tensor, rows are ordered with the
// head index fastest, so a warp reads neighbouring heads of one token (adjacent memory in HF's
// [B, S, H, D] layout) and shares that token's cos / sin in L1. Each item reads its inputs before
// writing, so an output may be its input (in place). No reductions: deterministic.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/vector_access.cuh"
#include "math/rope.h"

namespace tigon::cuda::rotary {

struct KernelTensor {
  const void* in = nullptr;
  void* out = nullptr;
  std::int64_t n1 = 1, n2 = 1;  // heads and sequence sizes of the row decomposition
  std::int64_t in_strides[4] = {};
  std::int64_t out_strides[4] = {};
  std::int64_t rot_items = 0;  // pair chunks per row: h / V
  std::int64_t row_items = 0;  // rot_items + pass chunks per row
  std::int64_t items = 0;      // rows * row_items
};

struct KernelParams {
  KernelTensor tensors[2];
  int count = 0;
  const void* cos = nullptr;
  const void* sin = nullptr;
  std::int64_t cos_strides[4] = {};
  std::int64_t sin_strides[4] = {};
  std::int64_t half = 0;  // h = R / 2
  std::int64_t total_items = 0;
};

// Index: uint32_t when every item index (plus one grid stride) fits, else int64_t. Pointer
// offsets are always 64-bit.
template <typename Math, bool kBackward, int V, typename Index>
__global__ void __launch_bounds__(256) rope_kernel(const KernelParams p) {
  using T = typename Math::X;
  using C = typename Math::Cos;
  using P = typename Math::P;
  using In = std::conditional_t<kBackward, P, T>;
  using Out = std::conditional_t<kBackward, T, P>;

  const Index total = static_cast<Index>(p.total_items);
  const Index grid_stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index item = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += grid_stride) {
    Index local = item;
    const bool second = p.count == 2 && local >= static_cast<Index>(p.tensors[0].items);
    // A select between two constant-bank structs, not a dynamic index (which would spill the
    // parameters to local memory).
    const KernelTensor t = second ? p.tensors[1] : p.tensors[0];
    if (second) local -= static_cast<Index>(p.tensors[0].items);

    const Index row_items = static_cast<Index>(t.row_items);
    const Index n1 = static_cast<Index>(t.n1), n2 = static_cast<Index>(t.n2);
    Index row = local / row_items;
    const Index chunk = local - row * row_items;
    const Index i1 = row % n1;
    row /= n1;
    const Index i2 = row % n2;
    const Index i0 = row / n2;
    const std::int64_t b0 = static_cast<std::int64_t>(i0), b1 = static_cast<std::int64_t>(i1),
                       b2 = static_cast<std::int64_t>(i2);
    const In* x = static_cast<const In*>(t.in) + b0 * t.in_strides[0] + b1 * t.in_strides[1] +
                  b2 * t.in_strides[2];
    Out* y = static_cast<Out*>(t.out) + b0 * t.out_strides[0] + b1 * t.out_strides[1] +
             b2 * t.out_strides[2];
    const std::int64_t xs = t.in_strides[3], ys = t.out_strides[3];

    if (chunk >= static_cast<Index>(t.rot_items)) {
      // Channels >= R: copied forward (widened to P), rounded to T backward.
      const std::int64_t j = 2 * p.half + static_cast<std::int64_t>(chunk - t.rot_items) * V;
      const Pack<In, V> v = load_pack<In, V>(x + j * xs);
      Out r[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        r[e] = math::from_float<Out>(kBackward ? Math::grad_pass(v.value(e)) : v.value(e));
      }
      store_pack<Out, V>(y + j * ys, r);
      continue;
    }

    const std::int64_t j = static_cast<std::int64_t>(chunk) * V;
    const std::int64_t h = p.half;
    const C* c = static_cast<const C*>(p.cos) + b0 * p.cos_strides[0] + b1 * p.cos_strides[1] +
                 b2 * p.cos_strides[2];
    const C* s = static_cast<const C*>(p.sin) + b0 * p.sin_strides[0] + b1 * p.sin_strides[1] +
                 b2 * p.sin_strides[2];
    const std::int64_t cs = p.cos_strides[3], ss = p.sin_strides[3];
    const Pack<In, V> x1 = load_pack<In, V>(x + j * xs);
    const Pack<In, V> x2 = load_pack<In, V>(x + (j + h) * xs);
    const Pack<C, V> c1 = load_pack<C, V, Load::kReadOnly>(c + j * cs);
    const Pack<C, V> c2 = load_pack<C, V, Load::kReadOnly>(c + (j + h) * cs);
    const Pack<C, V> s1 = load_pack<C, V, Load::kReadOnly>(s + j * ss);
    const Pack<C, V> s2 = load_pack<C, V, Load::kReadOnly>(s + (j + h) * ss);
    Out r1[V], r2[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float a = x1.value(e), b = x2.value(e);
      if constexpr (kBackward) {
        r1[e] = math::from_float<Out>(Math::grad_first(a, b, c1.value(e), s2.value(e)));
        r2[e] = math::from_float<Out>(Math::grad_second(a, b, c2.value(e), s1.value(e)));
      } else {
        r1[e] = math::from_float<Out>(Math::first(a, b, c1.value(e), s1.value(e)));
        r2[e] = math::from_float<Out>(Math::second(a, b, c2.value(e), s2.value(e)));
      }
    }
    store_pack<Out, V>(y + j * ys, r1);
    store_pack<Out, V>(y + (j + h) * ys, r2);
  }
}

}  // namespace tigon::cuda::rotary
