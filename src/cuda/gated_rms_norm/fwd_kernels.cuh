// Gated RMSNorm forward kernels: y = round_T(round_P(w * round_T(x * r)) * silu(gate)). Per-element
// arithmetic is math::GatedRmsNorm (shared with the CPU backend); the row machinery (split, thread
// share, row sums) is RMSNorm's. A row's sum of squares has a fixed order that depends on the
// RowSplit alone: each thread's packs in order, then row_group_sum over the row's threads.
#pragma once

#include <cstdint>

#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/gated_rms_norm/layout.cuh"
#include "cuda/rms_norm/row_sum.cuh"
#include "cuda/rms_norm/thread_share.cuh"
#include "cuda/rms_norm/weight_pack.cuh"
#include "math/gated_rms_norm.h"

namespace tigon::cuda::gated_rms_norm {

using rms_norm::kMaxRowThreads;
using rms_norm::kTwoPassThreads;

// y for the P elements of one pack.
template <typename X, typename W, int P>
__device__ __forceinline__ void gate_pack(const Pack<X, P>& x, const Pack<X, P>& gate,
                                          const Pack<W, P>& w, float r, X* y) {
  using Math = math::GatedRmsNorm<X, W>;
  X out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    out[i] = Math::output(Math::weighted(x.value(i), r, w.at(i)), gate.value(i));
  }
  store_pack<X, P>(y, out);
}

// Rows held in registers: each thread keeps up to kPacksPerThread packs of x and of the gate, so
// both are read once and y written once. Several rows a block for short rows (Qwen3-Next's 128),
// one row a block for long ones; blocks loop over row blocks.
template <typename X, typename W, int P>
__global__ void __launch_bounds__(kMaxRowThreads) gated_rms_norm_fwd_kernel(const FwdParams p) {
  using Math = math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
  constexpr int K = kPacksPerThread;
  const rms_norm::ThreadShare t = rms_norm::thread_share<K>(p.split);
  const int stride = t.group * P;
  const W* weight = static_cast<const W*>(p.weight) + t.first_pack * P;

  __shared__ rms_norm::RowSumShared row_sum_shared;
  rms_norm::RowSum<false> row_sum(row_sum_shared, p.split, {}, t);
  for (std::int64_t row0 = t.unit * t.rows_in_block; row0 < p.rows;
       row0 += t.units * t.rows_in_block) {
    const std::int64_t row = row0 + t.slot;
    const int packs = row < p.rows ? t.packs : 0;
    const std::int64_t offset = t.first_pack * P;
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + offset;
    const X* gate_row = static_cast<const X*>(p.gate) + row * p.gate_row_stride + offset;
    Pack<X, P> x[K], gate[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) {
        x[k] = load_pack<X, P>(x_row + k * stride);
        gate[k] = load_pack<X, P>(gate_row + k * stride);
      }
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) {
#pragma unroll
        for (int i = 0; i < P; ++i) sum += Norm::square(x[k].value(i));
      }
    }
    sum = row_sum(sum, t.group, row < p.rows ? row : -1);  // every thread of the block calls it
    if (row >= p.rows) continue;
    const float r = Norm::rstd(sum, p.hidden, p.eps);
    if (t.lane == 0) p.rstd[row] = r;
    X* y_row = static_cast<X*>(p.y) + row * p.y_row_stride + offset;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) {
        gate_pack<X, W, P>(x[k], gate[k], load_pack<W, P, Load::kReadOnly>(weight + k * stride), r,
                           y_row + k * stride);
      }
    }
  }
}

// Rows too long for one CTA's registers: one row a block, x read twice (the second read mostly
// hits L2), the gate once.
template <typename X, typename W, int P>
__global__ void __launch_bounds__(kTwoPassThreads)
    gated_rms_norm_fwd_two_pass_kernel(const FwdParams p) {
  using Math = math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);
  const W* weight = static_cast<const W*>(p.weight);

  __shared__ float warp_sums[2][kTwoPassThreads / kWarpSize];
  int parity = 0;
  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
    const X* gate_row = static_cast<const X*>(p.gate) + row * p.gate_row_stride;
    X* y_row = static_cast<X*>(p.y) + row * p.y_row_stride;
    float sum = 0.0f;
    for (std::int64_t pack = threadIdx.x; pack < packs; pack += step) {
      const Pack<X, P> x = load_pack<X, P>(x_row + pack * P);
#pragma unroll
      for (int i = 0; i < P; ++i) sum += Norm::square(x.value(i));
    }
    sum = row_group_sum(sum, static_cast<int>(blockDim.x), warp_sums[parity]);
    parity ^= 1;
    const float r = Norm::rstd(sum, p.hidden, p.eps);
    if (threadIdx.x == 0) p.rstd[row] = r;
    for (std::int64_t pack = threadIdx.x; pack < packs; pack += step) {
      gate_pack<X, W, P>(load_pack<X, P>(x_row + pack * P), load_pack<X, P>(gate_row + pack * P),
                         load_pack<W, P, Load::kReadOnly>(weight + pack * P), r, y_row + pack * P);
    }
  }
}

}  // namespace tigon::cuda::gated_rms_norm
