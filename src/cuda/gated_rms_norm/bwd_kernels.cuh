// Gated RMSNorm backward kernels: dx, dgate for every row and float32 dW partials per dW group
// (RMSNorm's groups and finishing kernel add them in a fixed order: no float atomics, bitwise
// reproducible). Per element, math::GatedRmsNorm and RMSNorm's kLlama backward:
//     dp = dy * silu(gate), dgate = silu_backward(dy * p, gate),
//     dx = r * (m - xhat * sum(m * xhat) / H) with m = dp * w, dW += dp * round_T(x * r).
// dx or dgate may alias dy: each element's dy is read by the thread that later writes it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/gated_rms_norm/layout.cuh"
#include "cuda/rms_norm/bwd_kernels.cuh"
#include "cuda/rms_norm/row_sum.cuh"
#include "cuda/rms_norm/thread_share.cuh"
#include "math/gated_rms_norm.h"

namespace tigon::cuda::gated_rms_norm {

using rms_norm::kMaxRowThreads;
using rms_norm::kTwoPassThreads;

// The pack's terms of sum(m * xhat), added to `sum` in element order (as the CPU forms each term).
template <typename X, typename W, int P>
__device__ __forceinline__ float grad_dot_pack(const Pack<X, P>& dy, const Pack<X, P>& x,
                                               const Pack<X, P>& gate, const Pack<W, P>& w, float r,
                                               float sum) {
  using Math = math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float dp = Math::grad_norm_output(dy.value(i), gate.value(i));
    sum += Norm::grad_scaled(dp, Norm::scale(w.at(i), 0.0f)) * (x.value(i) * r);
  }
  return sum;
}

// dx and dgate of one pack (stored), its dW terms added to acc.
template <typename X, typename W, int P>
__device__ __forceinline__ void grad_pack(const Pack<X, P>& dy, const Pack<X, P>& x,
                                          const Pack<X, P>& gate, const Pack<W, P>& w, float r,
                                          float mean_m_xhat, float (&acc)[P], X* dx, X* dgate) {
  using Math = math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
  X dx_out[P], dgate_out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float g = dy.value(i);
    const float xf = x.value(i);
    const float gf = gate.value(i);
    const float dp = Math::grad_norm_output(g, gf);
    acc[i] += Norm::grad_weight_term(dp, xf, r);
    const float m = Norm::grad_scaled(dp, Norm::scale(w.at(i), 0.0f));
    dx_out[i] = math::from_float<X>(Norm::grad_input(m, xf * r, r, mean_m_xhat));
    dgate_out[i] = Math::grad_gate(g, Math::weighted(xf, r, w.at(i)), gf);
  }
  store_pack<X, P>(dx, dx_out);
  store_pack<X, P>(dgate, dgate_out);
}

// Rows held in registers (dy, x and gate: up to kPacksPerThread packs each). A block takes whole
// dW groups; row slot q of the block handles rows q, q + rows_in_block, ... of the group and
// accumulates their dW terms in registers, which become the group's partial row at its end
// (RMSNorm's store_dw_partial: slots added in slot order). Dynamic shared memory:
// rms_norm::dw_slot_floats.
template <typename X, typename W, int P>
__global__ void __launch_bounds__(kMaxRowThreads, 1) gated_rms_norm_bwd_kernel(const BwdParams p) {
  allow_dependent_launch();  // the dW finishing kernel waits for this whole grid anyway
  using Norm = typename math::GatedRmsNorm<X, W>::Norm;
  constexpr int K = kPacksPerThread;
  const rms_norm::ThreadShare t = rms_norm::thread_share<K>(p.split);
  const int stride = t.group * P;
  const std::int64_t offset = t.first_pack * P;
  const W* weight = static_cast<const W*>(p.weight) + offset;

  __shared__ rms_norm::RowSumShared row_sum_shared;
  rms_norm::RowSum<false> row_sum(row_sum_shared, p.split, {}, t);
  extern __shared__ float slot_partials[];
  for (std::int64_t g = t.unit; g < p.groups.groups; g += t.units) {
    const std::int64_t group_begin = g * p.groups.rows_per_group;
    const std::int64_t group_end = min(group_begin + p.groups.rows_per_group, p.rows);
    float acc[K][P];
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int i = 0; i < P; ++i) acc[k][i] = 0.0f;
    }
    for (std::int64_t row0 = group_begin; row0 < group_end; row0 += t.rows_in_block) {
      const std::int64_t row = row0 + t.slot;
      const int packs = row < group_end ? t.packs : 0;
      const X* dy_row = static_cast<const X*>(p.dy) + row * p.dy_row_stride + offset;
      const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + offset;
      const X* gate_row = static_cast<const X*>(p.gate) + row * p.gate_row_stride + offset;
      // The weight is loaded at each use rather than held: held beside dy, x, gate and the dW
      // sums it spilled (60-180 bytes a thread with 16-byte packs, sm_90).
      Pack<X, P> dy[K], x[K], gate[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          dy[k] = load_pack<X, P>(dy_row + k * stride);
          x[k] = load_pack<X, P>(x_row + k * stride);
          gate[k] = load_pack<X, P>(gate_row + k * stride);
        }
      }
      const float r = packs > 0 ? p.rstd[row] : 0.0f;
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          sum = grad_dot_pack<X, W, P>(
              dy[k], x[k], gate[k], load_pack<W, P, Load::kReadOnly>(weight + k * stride), r, sum);
        }
      }
      sum = row_sum(sum, t.group, packs > 0 ? row : -1);  // every thread of the block calls it
      if (packs == 0) continue;
      const float mean_m_xhat = sum / static_cast<float>(p.hidden);
      X* dx_row = static_cast<X*>(p.dx) + row * p.dx_row_stride + offset;
      X* dgate_row = static_cast<X*>(p.dgate) + row * p.dgate_row_stride + offset;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          grad_pack<X, W, P>(dy[k], x[k], gate[k],
                             load_pack<W, P, Load::kReadOnly>(weight + k * stride), r, mean_m_xhat,
                             acc[k], dx_row + k * stride, dgate_row + k * stride);
        }
      }
    }
    rms_norm::store_dw_partial<Norm, P, K>(p, t, g, acc, slot_partials);
  }
}

// Rows too long for one CTA's registers: one dW group a block, its rows in order, each read twice
// (the row's sum, then dx, dgate and dW). Each thread owns the same columns in every row, so it
// carries the group's dW sums for them in the partial row itself, which only it reads and writes.
template <typename X, typename W, int P>
__global__ void __launch_bounds__(kTwoPassThreads, 1)
    gated_rms_norm_bwd_two_pass_kernel(const BwdParams p) {
  allow_dependent_launch();
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);
  const W* weight = static_cast<const W*>(p.weight);

  __shared__ float warp_sums[2][kTwoPassThreads / kWarpSize];
  int parity = 0;
  for (std::int64_t g = blockIdx.x; g < p.groups.groups; g += gridDim.x) {
    const std::int64_t group_begin = g * p.groups.rows_per_group;
    const std::int64_t group_end = min(group_begin + p.groups.rows_per_group, p.rows);
    float* partial_row = p.partials + g * p.hidden;
    for (std::int64_t row = group_begin; row < group_end; ++row) {
      const X* dy_row = static_cast<const X*>(p.dy) + row * p.dy_row_stride;
      const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
      const X* gate_row = static_cast<const X*>(p.gate) + row * p.gate_row_stride;
      const float r = p.rstd[row];
      float sum = 0.0f;
      for (std::int64_t pack = threadIdx.x; pack < packs; pack += step) {
        sum = grad_dot_pack<X, W, P>(load_pack<X, P>(dy_row + pack * P),
                                     load_pack<X, P>(x_row + pack * P),
                                     load_pack<X, P>(gate_row + pack * P),
                                     load_pack<W, P, Load::kReadOnly>(weight + pack * P), r, sum);
      }
      sum = row_group_sum(sum, static_cast<int>(blockDim.x), warp_sums[parity]);
      parity ^= 1;
      const float mean_m_xhat = sum / static_cast<float>(p.hidden);
      X* dx_row = static_cast<X*>(p.dx) + row * p.dx_row_stride;
      X* dgate_row = static_cast<X*>(p.dgate) + row * p.dgate_row_stride;
      for (std::int64_t pack = threadIdx.x; pack < packs; pack += step) {
        float acc[P];
        if (row == group_begin) {
#pragma unroll
          for (int i = 0; i < P; ++i) acc[i] = 0.0f;
        } else {
          const Pack<float, P> carried = load_pack<float, P>(partial_row + pack * P);
#pragma unroll
          for (int i = 0; i < P; ++i) acc[i] = carried.value(i);
        }
        grad_pack<X, W, P>(load_pack<X, P>(dy_row + pack * P), load_pack<X, P>(x_row + pack * P),
                           load_pack<X, P>(gate_row + pack * P),
                           load_pack<W, P, Load::kReadOnly>(weight + pack * P), r, mean_m_xhat, acc,
                           dx_row + pack * P, dgate_row + pack * P);
        store_pack<float, P>(partial_row + pack * P, acc);
      }
    }
  }
}

}  // namespace tigon::cuda::gated_rms_norm
