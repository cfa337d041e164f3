// Host side of the RoPE kernel for one direction: picks the vector width (16 bytes of T when
// every pointer, stride and size allows, else one element), the index width, and launches.
// Included by rope_fwd.cu and rope_bwd.cu, so each direction's kernels compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/rope/kernels.cuh"
#include "math/rope.h"
#include "ops/rope_args.h"

namespace tigon::cuda::rotary {

inline constexpr int kThreads = 256;

inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Unit last stride and the other strides a multiple of V: every pack starts on a pack boundary.
inline bool strides_fit(const std::int64_t (&strides)[4], int v) {
  return strides[3] == 1 && strides[0] % v == 0 && strides[1] % v == 0 && strides[2] % v == 0;
}

template <typename In, typename Out, typename C, int V>
bool vectorizable(const detail::RopeArgs& a) {
  if ((a.rotary_dim / 2) % V != 0) return false;
  if (!strides_fit(a.cos_strides, V) || !strides_fit(a.sin_strides, V) ||
      !aligned(a.cos, kPackAlignment<C, V>) || !aligned(a.sin, kPackAlignment<C, V>)) {
    return false;
  }
  for (int i = 0; i < a.count; ++i) {
    const detail::RopeTensor& t = a.tensors[i];
    if (t.write_pass && (t.dim - a.rotary_dim) % V != 0) return false;
    if (!strides_fit(t.in_strides, V) || !strides_fit(t.out_strides, V) ||
        !aligned(t.in, kPackAlignment<In, V>) || !aligned(t.out, kPackAlignment<Out, V>)) {
      return false;
    }
  }
  return true;
}

inline KernelParams kernel_params(const detail::RopeArgs& a, int v) {
  KernelParams p;
  p.count = a.count;
  p.cos = a.cos;
  p.sin = a.sin;
  std::copy(a.cos_strides, a.cos_strides + 4, p.cos_strides);
  std::copy(a.sin_strides, a.sin_strides + 4, p.sin_strides);
  p.half = a.rotary_dim / 2;
  for (int i = 0; i < a.count; ++i) {
    const detail::RopeTensor& t = a.tensors[i];
    KernelTensor& k = p.tensors[i];
    k.in = t.in;
    k.out = t.out;
    k.n1 = t.sizes[1];
    k.n2 = t.sizes[2];
    std::copy(t.in_strides, t.in_strides + 4, k.in_strides);
    std::copy(t.out_strides, t.out_strides + 4, k.out_strides);
    k.rot_items = p.half / v;
    k.row_items = k.rot_items + (t.write_pass ? (t.dim - a.rotary_dim) / v : 0);
    k.items = t.rows() * k.row_items;
    p.total_items += k.items;
  }
  return p;
}

template <typename Math, bool kBackward, int V>
void launch(const detail::RopeArgs& a, cudaStream_t stream) {
  const KernelParams p = kernel_params(a, V);
  const std::int64_t blocks = std::min((p.total_items + kThreads - 1) / kThreads, kMaxGridBlocks);
  // 32-bit item indices while the last grid-stride step cannot wrap.
  if (p.total_items + blocks * kThreads < (std::int64_t{1} << 32)) {
    launch_kernel(rope_kernel<Math, kBackward, V, std::uint32_t>, blocks, dim3(kThreads), 0, 1,
                  stream, p);
  } else {
    launch_kernel(rope_kernel<Math, kBackward, V, std::int64_t>, blocks, dim3(kThreads), 0, 1,
                  stream, p);
  }
}

template <bool kBackward>
void launch_direction(const detail::RopeArgs& a, cudaStream_t stream) {
  detail::dispatch_dtype(a.x_dtype, [&](auto t_tag) {
    detail::dispatch_dtype(a.cos_dtype, [&](auto c_tag) {
      using Math = math::Rope<typename decltype(t_tag)::type, typename decltype(c_tag)::type>;
      using T = typename Math::X;
      using In = std::conditional_t<kBackward, typename Math::P, T>;
      using Out = std::conditional_t<kBackward, T, typename Math::P>;
      constexpr int kVec = static_cast<int>(16 / sizeof(T));
      if (vectorizable<In, Out, typename Math::Cos, kVec>(a)) {
        launch<Math, kBackward, kVec>(a, stream);
      } else {
        launch<Math, kBackward, 1>(a, stream);
      }
    });
  });
}

void launch_fwd(const detail::RopeArgs& a, cudaStream_t stream);
void launch_bwd(const detail::RopeArgs& a, cudaStream_t stream);

}  // namespace tigon::cuda::rotary
