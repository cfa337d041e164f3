// RMSNorm forward kernels. Per-element arithmetic is math::RmsNorm (shared with the CPU backend);
// these kernels only move data and add. A row's sum of squares is reduced in a fixed order that
// depends on the RowSplit alone.
#pragma once

#include <cstdint>

#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "math/float_types.h"

namespace tigon::cuda::rms_norm {

// y[j] for the P elements of one pack, from x (already in registers) and the weight pack.
template <typename Math, int P>
__device__ __forceinline__ void normalize_pack(const Pack<typename MathTraits<Math>::X, P>& x,
                                               const typename MathTraits<Math>::W* weight,
                                               float offset, float r,
                                               typename MathTraits<Math>::Y* y) {
  using T = MathTraits<Math>;
  typename T::Y out[P];
  if constexpr (T::kAffine) {
    const auto w = load_pack<typename T::W, P, /*kReadOnly=*/true>(weight);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      out[i] = Math::output(Math::normalized(x.value(i), r), Math::scale(w.at(i), offset));
    }
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) out[i] = Math::output(Math::normalized(x.value(i), r), 1.0f);
  }
  store_pack<typename T::Y, P>(y, out);
}

// Rows held in registers: each thread keeps up to kFwdPacksPerThread packs of its row slice, so x
// is read once and y written once. Several rows per block for short rows; one row per block, or
// per cluster of blocks (sm_90), for long ones. Blocks loop over row blocks, so any row count
// works.
template <typename Math, int P>
__global__ void __launch_bounds__(kMaxRowThreads, 2) rms_norm_fwd_kernel(const FwdParams p) {
  using T = MathTraits<Math>;
  using X = typename T::X;
  using W = typename T::W;
  using Y = typename T::Y;
  constexpr int K = kFwdPacksPerThread;
  const RowSplit& s = p.split;
  const int group = s.threads_per_row;
  const int slot = static_cast<int>(threadIdx.x) / group;
  const int lane = static_cast<int>(threadIdx.x) - slot * group;
  const int rows_in_block = static_cast<int>(blockDim.x) / group;
  const int slice = static_cast<int>(blockIdx.x) % s.slices;
  const std::int64_t unit = blockIdx.x / s.slices;
  const std::int64_t units = gridDim.x / s.slices;
  // This thread's packs: first_pack + k * group for k < my_packs (fewer than K at a row's end).
  const int first_pack = slice * s.slice_packs + lane;
  const int end_pack =
      static_cast<int>(min(static_cast<std::int64_t>(slice + 1) * s.slice_packs, s.packs));
  const int my_packs =
      first_pack < end_pack ? min(K, (end_pack - first_pack + group - 1) / group) : 0;
  const int stride = group * P;  // elements between a thread's consecutive packs
  const W* weight = T::kAffine ? static_cast<const W*>(p.weight) + first_pack * P : nullptr;

  __shared__ float warp_sums[2][kMaxRowThreads / kWarpSize];
  __shared__ float slice_sums[2];
  int parity = 0;
  for (std::int64_t row0 = unit * rows_in_block; row0 < p.rows; row0 += units * rows_in_block) {
    const std::int64_t row = row0 + slot;
    const int packs = row < p.rows ? my_packs : 0;
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + first_pack * P;

    Pack<X, P> x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) x[k] = load_pack<X, P>(x_row + k * stride);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) {
#pragma unroll
        for (int i = 0; i < P; ++i) sum += Math::square(x[k].value(i));
      }
    }
    sum = row_group_sum(sum, group, warp_sums[parity]);
    if (s.slices > 1) sum = cluster_sum(sum, &slice_sums[parity], s.slices);
    parity ^= 1;
    if (row >= p.rows) continue;

    const float r = Math::rstd(sum, p.hidden, p.eps);
    if (lane == 0 && slice == 0) p.rstd[row] = r;
    Y* y_row = static_cast<Y*>(p.y) + row * p.y_row_stride + first_pack * P;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs)
        normalize_pack<Math, P>(x[k], weight + k * stride, p.offset, r, y_row + k * stride);
    }
  }
  if (s.slices > 1) cluster_barrier();
}

// Rows too long for registers (and no cluster big enough): one row per block, read twice. The
// second read usually hits L2, since the block read the same row a moment before.
template <typename Math, int P>
__global__ void __launch_bounds__(kTwoPassThreads, 2)
    rms_norm_fwd_two_pass_kernel(const FwdParams p) {
  using T = MathTraits<Math>;
  using X = typename T::X;
  using W = typename T::W;
  using Y = typename T::Y;
  constexpr int kUnroll = 4;  // packs in flight per thread
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);

  __shared__ float warp_sums[2][kTwoPassThreads / kWarpSize];
  int parity = 0;
  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
    float sum = 0.0f;
    for (std::int64_t base = threadIdx.x; base < packs; base += kUnroll * step) {
      Pack<X, P> x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * step < packs) x[u] = load_pack<X, P>(x_row + (base + u * step) * P);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * step < packs) {
#pragma unroll
          for (int i = 0; i < P; ++i) sum += Math::square(x[u].value(i));
        }
      }
    }
    sum = row_group_sum(sum, static_cast<int>(blockDim.x), warp_sums[parity]);
    parity ^= 1;

    const float r = Math::rstd(sum, p.hidden, p.eps);
    if (threadIdx.x == 0) p.rstd[row] = r;
    Y* y_row = static_cast<Y*>(p.y) + row * p.y_row_stride;
    const W* weight = static_cast<const W*>(p.weight);
    for (std::int64_t base = threadIdx.x; base < packs; base += kUnroll * step) {
      Pack<X, P> x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * step < packs) x[u] = load_pack<X, P>(x_row + (base + u * step) * P);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t pack = base + u * step;
        if (pack < packs)
          normalize_pack<Math, P>(x[u], weight + pack * P, p.offset, r, y_row + pack * P);
      }
    }
  }
}

}  // namespace tigon::cuda::rms_norm
