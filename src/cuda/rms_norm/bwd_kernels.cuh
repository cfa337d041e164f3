// RMSNorm backward kernels: dx for every row and float32 dW partials per row group (layout.cuh);
// dw_finish.cuh then adds the partial rows in order and rounds to the weight dtype.
// No float atomics anywhere: every sum has a fixed order, so dW and dx are bitwise reproducible.
// dx may alias dy (in place): each element's dy is read by the thread that later writes its dx.
// kResidual (fused_add_rms_norm): x is h and dx = dh + the norm's dx (math::ResidualAdd); dx may
// alias dh, read like dy by the thread that writes dx. Plain RMSNorm compiles none of it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/l2_policy.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "cuda/rms_norm/residual_pack.cuh"
#include "cuda/rms_norm/row_sum.cuh"
#include "cuda/rms_norm/thread_share.cuh"
#include "cuda/rms_norm/weight_pack.cuh"
#include "math/float_types.h"

namespace tigon::cuda::rms_norm {

// Row term of dx: sum over the pack of dy * s * (x * r), formed as the CPU backend forms it; w is
// the weight pack (weight_pack.cuh).
template <typename Math, int P>
__device__ __forceinline__ float grad_dot_pack(const Pack<typename MathTraits<Math>::Y, P>& dy,
                                               const Pack<typename MathTraits<Math>::X, P>& x,
                                               const Pack<typename MathTraits<Math>::W, P>& w,
                                               float offset, float r, float sum) {
  using T = MathTraits<Math>;
  if constexpr (T::kAffine) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      sum += Math::grad_scaled(dy.value(i), Math::scale(w.at(i), offset)) * (x.value(i) * r);
    }
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) sum += Math::grad_scaled(dy.value(i), 1.0f) * (x.value(i) * r);
  }
  return sum;
}

// dx for one pack (stored to dx), and the pack's dW terms added to acc (affine only). dh: h's own
// gradient, added to dx with kResidual (ignored otherwise).
template <typename Math, int P, bool kResidual = false>
__device__ __forceinline__ void grad_pack(const Pack<typename MathTraits<Math>::Y, P>& dy,
                                          const Pack<typename MathTraits<Math>::X, P>& x,
                                          const Pack<typename MathTraits<Math>::W, P>& w,
                                          float offset, float r, float mean_m_xhat, float (&acc)[P],
                                          typename MathTraits<Math>::X* dx,
                                          const Pack<typename MathTraits<Math>::X, P>& dh = {}) {
  using T = MathTraits<Math>;
  typename T::X out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float g = dy.value(i);
    const float xf = x.value(i);
    float s = 1.0f;
    if constexpr (T::kAffine) {
      s = Math::scale(w.at(i), offset);
      acc[i] += Math::grad_weight_term(g, xf, r);
    }
    const float norm_dx = Math::grad_input(Math::grad_scaled(g, s), xf * r, r, mean_m_xhat);
    if constexpr (kResidual) {
      out[i] = math::ResidualAdd<typename T::X>::grad(dh.value(i), norm_dx);
    } else {
      out[i] = math::from_float<typename T::X>(norm_dx);
    }
  }
  store_pack<typename T::X, P>(dx, out);
}

// Row `row` of dh from element `first` on (kResidual; null for plain RMSNorm, which has no dh).
template <bool kResidual, typename X>
__device__ __forceinline__ const X* dh_row_of(const BwdParamsOf<kResidual>& p, std::int64_t row,
                                              std::int64_t first) {
  if constexpr (kResidual) {
    return static_cast<const X*>(p.dh) + row * p.dh_row_stride + first;
  } else {
    return nullptr;
  }
}

// Whether the register backward loads dh (kResidual) with dy and x, before the row's reduction:
// not where its registers are short already (cuobjdump/ptxas -v, sm_90, 2026-12-07: the cluster
// kernel, and float32 weights loaded at each use beside 16-bit x, spilled 24-56 bytes).
template <typename Math, bool kSliced>
inline constexpr bool kDhEarly =
    !kSliced && sizeof(typename MathTraits<Math>::W) <= sizeof(typename MathTraits<Math>::X);

// One row's step once this thread's packs dy[k], x[k], k < packs, are in registers (packs = 0 for
// a slot past its group's rows): the row's sum of dy * s * xhat over its group (and cluster), dx,
// and the row's dW terms added to acc. Every thread of the block (and cluster) must call it, in
// the same order. dh[k]: h's gradient packs (kResidual only); loaded here, after the reduction,
// where kDhEarly<Math, kSliced> is false (the registers would spill).
template <typename Math, int P, int K, bool kSliced, bool kResidual>
__device__ __forceinline__ void grad_row(const BwdParamsOf<kResidual>& p, const ThreadShare& t,
                                         std::int64_t row, float r,
                                         const Pack<typename MathTraits<Math>::Y, P> (&dy)[K],
                                         const Pack<typename MathTraits<Math>::X, P> (&x)[K],
                                         const Pack<typename MathTraits<Math>::X, P> (&dh)[K],
                                         int packs, float (&acc)[K][P], RowSum<kSliced>& row_sum) {
  using T = MathTraits<Math>;
  using X = typename T::X;
  using W = typename T::W;
  const int stride = t.group * P;  // elements between a thread's consecutive packs
  const W* weight = T::kAffine ? static_cast<const W*>(p.weight) + t.first_pack * P : nullptr;
  // The weight packs are loaded once, before the reduction, for both the sum and dx (a second
  // load after the reduction puts an L2 round trip on every row's critical path), where they fit
  // beside x, dy and the dW sums: a weight wider than x (float32 master weights with bf16
  // activations) spilled 72 bytes that way, so it is loaded at each use.
  const RowWeights<Math, P, K, (sizeof(W) <= sizeof(X))> w(weight, stride, packs);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k < packs) sum = grad_dot_pack<Math, P>(dy[k], x[k], w[k], p.offset, r, sum);
  }
  sum = row_sum(sum, t.group, packs > 0 ? row : -1);
  if (packs == 0) return;
  if constexpr (kSliced) {
    if (p.slice_sums.pass == SlicePass::kPublish) return;
  }

  const float mean_m_xhat = sum / static_cast<float>(p.hidden);
  X* dx_row = static_cast<X*>(p.dx) + row * p.dx_row_stride + t.first_pack * P;
  const X* dh_row = dh_row_of<kResidual, X>(p, row, t.first_pack * P);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k < packs) {
      if constexpr (kResidual && !kDhEarly<Math, kSliced>) {
        grad_pack<Math, P, kResidual>(dy[k], x[k], w[k], p.offset, r, mean_m_xhat, acc[k],
                                      dx_row + k * stride, load_pack<X, P>(dh_row + k * stride));
      } else {
        grad_pack<Math, P, kResidual>(dy[k], x[k], w[k], p.offset, r, mean_m_xhat, acc[k],
                                      dx_row + k * stride, dh[k]);
      }
    }
  }
}

// The end of dW group g: this block's accumulators become the group's float32 partial row. With
// several row slots a block, the slots add theirs into one shared slice row in slot order, so the
// sum is ((slot 0 + slot 1) + slot 2) + ...; the last slot stores the total. Element e of
// `slot_partials` (group * K * P floats) is local pack (k * group + lane), lane i, as in the
// registers. Every thread of the block must call it. Params: any kernel's parameters with
// `partials` and `hidden` (RMSNorm's BwdParams, gated RMSNorm's).
template <typename Math, int P, int K, typename Params>
__device__ __forceinline__ void store_dw_partial(const Params& p, const ThreadShare& t,
                                                 std::int64_t g, const float (&acc)[K][P],
                                                 float* slot_partials) {
  if constexpr (MathTraits<Math>::kAffine) {
    const int stride = t.group * P;
    float* partial_row = p.partials + g * p.hidden + t.first_pack * P;
    if (t.rows_in_block == 1) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < t.packs) store_pack<float, P>(partial_row + k * stride, acc[k]);
      }
      return;
    }
#pragma unroll 1
    for (int q = 0; q < t.rows_in_block; ++q) {
      if (t.slot == q) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          float* shared = slot_partials + (k * t.group + t.lane) * P;
          float total[P];
#pragma unroll
          for (int i = 0; i < P; ++i) total[i] = q == 0 ? acc[k][i] : shared[i] + acc[k][i];
          if (q + 1 < t.rows_in_block) {
#pragma unroll
            for (int i = 0; i < P; ++i) shared[i] = total[i];
          } else if (k < t.packs) {
            store_pack<float, P>(partial_row + k * stride, total);
          }
        }
      }
      __syncthreads();
    }
  }
}

// Floats of shared memory store_dw_partial needs (0 with one row slot a block or no weight).
template <typename Math, int P>
inline std::size_t dw_slot_floats(const RowSplit& split) {
  return MathTraits<Math>::kAffine && rows_per_block(split) > 1
             ? static_cast<std::size_t>(split.threads_per_row) * kBwdPacksPerThread * P
             : 0;
}

// Rows held in registers (x and dy: up to K packs each), so each is read once. A block (or
// cluster, sm_90) takes whole dW groups; row slot k of the block handles rows k,
// k + rows_in_block, ... of the group and accumulates their dW terms in registers; at the end of
// a group they become its partial row (store_dw_partial). 128 registers: 512 threads an SM (a
// 2-pack variant at 64 registers was 8-11 points of the copy ceiling slower on an H100 at H 1024
// and 2048, 2026-12-05). With p.prefetch (rows over clusters), each row block's loads are followed
// by L2 prefetches of the group's next row block, so memory stays busy through the row's
// reduction. Dynamic shared memory: dw_slot_floats<Math, P>.
// kSliced: the split has slices; rows of one CTA run without the slice code (RowSum<false>).
// kResidual: dh is loaded with dy and x where kDhEarly (else after the row's reduction, grad_row),
// and prefetched with them.
template <typename Math, int P, bool kSliced, bool kResidual = false>
__global__ void __launch_bounds__(kMaxRowThreads, 1)
    rms_norm_bwd_kernel(const BwdParamsOf<kResidual> p) {
  allow_dependent_launch();  // the dW finishing kernel waits for this whole grid anyway
  using T = MathTraits<Math>;
  using X = typename T::X;
  using Y = typename T::Y;
  constexpr int K = kBwdPacksPerThread;
  const ThreadShare t = thread_share<K>(p.split);
  const int stride = t.group * P;

  __shared__ RowSumShared row_sum_shared;
  RowSum<kSliced> row_sum(row_sum_shared, p.split, p.slice_sums, t);
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
      const Y* dy_row = static_cast<const Y*>(p.dy) + row * p.dy_row_stride + t.first_pack * P;
      const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + t.first_pack * P;
      const X* dh_row = dh_row_of<kResidual, X>(p, row, t.first_pack * P);
      Pack<Y, P> dy[K];
      Pack<X, P> x[K];
      Pack<X, P> dh[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          dy[k] = load_pack<Y, P>(dy_row + k * stride);
          x[k] = load_pack<X, P>(x_row + k * stride);
          if constexpr (kResidual && kDhEarly<Math, kSliced>) {
            dh[k] = load_pack<X, P>(dh_row + k * stride);
          }
        }
      }
      if (p.prefetch && row + t.rows_in_block < group_end) {
        const std::int64_t ahead = t.rows_in_block;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          if (k < packs) {
            prefetch_l2(dy_row + ahead * p.dy_row_stride + k * stride);
            prefetch_l2(x_row + ahead * p.x_row_stride + k * stride);
            if constexpr (kResidual) prefetch_l2(dh_row + ahead * p.dh_row_stride + k * stride);
          }
        }
      }
      const float r = row < group_end ? p.rstd[row] : 0.0f;
      grad_row<Math, P, K, kSliced, kResidual>(p, t, row, r, dy, x, dh, packs, acc, row_sum);
    }
    if (!kSliced || p.slice_sums.pass != SlicePass::kPublish) {
      store_dw_partial<Math, P, K>(p, t, g, acc, slot_partials);
    }
  }
  if constexpr (kSliced) {
    if (p.slice_sums.pass == SlicePass::kCluster) cluster_barrier();
  }
}

// Rows too long for registers: per dW group, chunks of kChunkRows rows. Phase A reduces each row of
// the chunk (dy, x read once); phase B walks the columns, each thread going down its column
// through the chunk's rows (dy, x read again), writing dx and accumulating dW in registers; the
// group's partial row carries the sum from one chunk to the next. Slower (dy and x are read twice)
// but correct for any length, with no shared-memory or register limit.
inline constexpr int kChunkRows = 32;

template <typename Math, int P, bool kResidual = false>
__global__ void __launch_bounds__(kTwoPassThreads, 1)
    rms_norm_bwd_two_pass_kernel(const BwdParamsOf<kResidual> p) {
  allow_dependent_launch();  // the dW finishing kernel waits for this whole grid anyway
  using T = MathTraits<Math>;
  using X = typename T::X;
  using W = typename T::W;
  using Y = typename T::Y;
  constexpr int kUnroll = 4;     // packs of a row in flight per thread (phase A)
  constexpr int kRowUnroll = 2;  // rows in flight per thread (phase B)
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);
  const W* weight = static_cast<const W*>(p.weight);

  __shared__ float warp_sums[2][kTwoPassThreads / kWarpSize];
  __shared__ float chunk_means[kChunkRows];
  int parity = 0;
  for (std::int64_t g = blockIdx.x; g < p.groups.groups; g += gridDim.x) {
    const std::int64_t group_begin = g * p.groups.rows_per_group;
    const std::int64_t group_end = min(group_begin + p.groups.rows_per_group, p.rows);
    float* partial_row = T::kAffine ? p.partials + g * p.hidden : nullptr;
    for (std::int64_t chunk = group_begin; chunk < group_end; chunk += kChunkRows) {
      const int chunk_rows =
          static_cast<int>(min(static_cast<std::int64_t>(kChunkRows), group_end - chunk));

      // Phase A: mean of dy * s * xhat for each row of the chunk.
      for (int c = 0; c < chunk_rows; ++c) {
        const std::int64_t row = chunk + c;
        const Y* dy_row = static_cast<const Y*>(p.dy) + row * p.dy_row_stride;
        const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
        const float r = p.rstd[row];
        float sum = 0.0f;
        for (std::int64_t base = threadIdx.x; base < packs; base += kUnroll * step) {
          Pack<Y, P> dy[kUnroll];
          Pack<X, P> x[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t pack = base + u * step;
            if (pack < packs) {
              dy[u] = load_pack<Y, P>(dy_row + pack * P);
              x[u] = load_pack<X, P>(x_row + pack * P);
            }
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t pack = base + u * step;
            if (pack < packs)
              sum = grad_dot_pack<Math, P>(dy[u], x[u], weight_pack<Math, P>(weight + pack * P),
                                           p.offset, r, sum);
          }
        }
        sum = row_group_sum(sum, static_cast<int>(blockDim.x), warp_sums[parity]);
        parity ^= 1;
        if (threadIdx.x == 0) chunk_means[c] = sum / static_cast<float>(p.hidden);
      }
      __syncthreads();

      // Phase B: dx and dW, column by column, rows of the chunk in order.
      for (std::int64_t pack = threadIdx.x; pack < packs; pack += step) {
        float acc[P];
#pragma unroll
        for (int i = 0; i < P; ++i) acc[i] = 0.0f;
        const Pack<W, P> w = weight_pack<Math, P>(weight + pack * P);  // the column's, all rows
        if (T::kAffine && chunk != group_begin) {
          const auto carried =
              load_pack<float, P>(partial_row + pack * P);  // this thread's own write
#pragma unroll
          for (int i = 0; i < P; ++i) acc[i] = carried.value(i);
        }
        for (int c0 = 0; c0 < chunk_rows; c0 += kRowUnroll) {
          Pack<Y, P> dy[kRowUnroll];
          Pack<X, P> x[kRowUnroll];
          Pack<X, P> dh[kRowUnroll];
#pragma unroll
          for (int u = 0; u < kRowUnroll; ++u) {
            const std::int64_t row = chunk + c0 + u;
            if (c0 + u < chunk_rows) {
              dy[u] =
                  load_pack<Y, P>(static_cast<const Y*>(p.dy) + row * p.dy_row_stride + pack * P);
              x[u] = load_pack<X, P>(static_cast<const X*>(p.x) + row * p.x_row_stride + pack * P);
              if constexpr (kResidual) {
                dh[u] =
                    load_pack<X, P>(static_cast<const X*>(p.dh) + row * p.dh_row_stride + pack * P);
              }
            }
          }
#pragma unroll
          for (int u = 0; u < kRowUnroll; ++u) {
            const std::int64_t row = chunk + c0 + u;
            if (c0 + u < chunk_rows) {
              grad_pack<Math, P, kResidual>(
                  dy[u], x[u], w, p.offset, p.rstd[row], chunk_means[c0 + u], acc,
                  static_cast<X*>(p.dx) + row * p.dx_row_stride + pack * P, dh[u]);
            }
          }
        }
        if constexpr (T::kAffine) store_pack<float, P>(partial_row + pack * P, acc);
      }
      __syncthreads();  // chunk_means is rewritten by the next chunk
    }
  }
}

}  // namespace tigon::cuda::rms_norm
