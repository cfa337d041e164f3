// LayerNorm backward kernels: dx for every row and float32 dW and dB partial rows per row group
// (layout.h); rms_norm/dw_finish.cuh then adds each gradient's partial rows in order and rounds.
// No float atomics: every sum has a fixed order, so dx, dW and dB are bitwise reproducible.
// dx may alias dy (in place): each element's dy is read by the thread that later writes its dx.
#pragma once

#include <cstdint>

#include "cuda/common/l2_policy.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/layer_norm/layout.h"
#include "cuda/layer_norm/params_pack.cuh"
#include "cuda/rms_norm/thread_share.cuh"
#include "math/layer_norm.h"

namespace tigon::cuda::layer_norm {

// One pack's terms of the row's two sums, sum(g * xhat) and sum(g), added on in element order.
template <typename X, typename W, int P>
__device__ __forceinline__ void add_row_terms(const Pack<X, P>& dy, const Pack<X, P>& x,
                                              const Pack<W, P>& w, bool has_w, float mean, float r,
                                              float& sum_g_xhat, float& sum_g) {
  using Math = math::LayerNorm<X, W, X>;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float g = Math::grad_scaled(dy.value(i), param_value(w, i, has_w, 1.0f));
    sum_g_xhat += g * Math::normalized(x.value(i), mean, r);
    sum_g += g;
  }
}

// dx for one pack (stored to dx), and its dW and dB terms added to the accumulators.
template <typename X, typename W, int P>
__device__ __forceinline__ void grad_pack(const Pack<X, P>& dy, const Pack<X, P>& x,
                                          const Pack<W, P>& w, bool has_w, float mean, float r,
                                          float mean_g_xhat, float mean_g, float (&acc_w)[P],
                                          float (&acc_b)[P], X* dx) {
  using Math = math::LayerNorm<X, W, X>;
  X out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float d = dy.value(i);
    const float xhat = Math::normalized(x.value(i), mean, r);
    acc_w[i] += Math::grad_weight_term(d, xhat);
    acc_b[i] += d;
    out[i] = Math::grad_input(Math::grad_scaled(d, param_value(w, i, has_w, 1.0f)), xhat, r,
                              mean_g_xhat, mean_g);
  }
  store_pack_global<X, P>(dx, out);
}

// A group's accumulators for `elements` consecutive columns from `column` become its partial rows.
template <int P>
__device__ __forceinline__ void store_partials(const BwdParams& p, std::int64_t g,
                                               std::int64_t column, const float (&acc_w)[P],
                                               const float (&acc_b)[P]) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (p.dw_partials) p.dw_partials[g * p.hidden + column + i] = acc_w[i];
    if (p.db_partials) p.db_partials[g * p.hidden + column + i] = acc_b[i];
  }
}

// Consecutive packs (of consecutive lanes) in one 128-byte line.
template <typename X, int P>
inline constexpr int kLinePacks = 128 / static_cast<int>(sizeof(X) * P) > 0
                                      ? 128 / static_cast<int>(sizeof(X) * P)
                                      : 1;

// Rows held in registers, one dW group at a time a CTA: each thread keeps K packs of dy and x of
// its row and the dW and dB sums of those columns over the group's rows of its row slot, in row
// order. With several row slots a block (K = 1 only: layout.h), the slots' sums meet in shared
// memory and are added in slot order: ((slot 0 + slot 1) + slot 2) + ...
template <typename X, typename W, int P, int K>
__global__ void __launch_bounds__(rms_norm::kMaxRowThreads)
    layer_norm_bwd_rows_kernel(const BwdParams p) {
  using Math = math::LayerNorm<X, W, X>;
  const rms_norm::ThreadShare t = rms_norm::thread_share<K>(p.split);
  const int stride = t.group * P;  // elements between a thread's consecutive packs
  const bool has_w = p.weight != nullptr;
  const float n = static_cast<float>(p.hidden);

  __shared__ float warp_sums[2][rms_norm::kMaxRowThreads / kWarpSize];
  __shared__ float slot_sums[K == 1 ? 2 * kBwdBlockThreads * kBwdMaxPack : 1];
  int parity = 0;
  for (std::int64_t g = blockIdx.x; g < p.groups.groups; g += gridDim.x) {
    const std::int64_t begin = g * p.groups.rows_per_group;
    const std::int64_t end = min(begin + p.groups.rows_per_group, p.rows);
    float acc_w[K][P], acc_b[K][P];
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int i = 0; i < P; ++i) acc_w[k][i] = acc_b[k][i] = 0.0f;
    }
    for (std::int64_t row0 = begin; row0 < end; row0 += t.rows_in_block) {
      const std::int64_t row = row0 + t.slot;
      const int packs = row < end ? t.packs : 0;
      const X* dy_row = static_cast<const X*>(p.dy) + row * p.dy_row_stride + t.first_pack * P;
      const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + t.first_pack * P;
      Pack<X, P> dy[K], x[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          dy[k] = load_pack<X, P>(dy_row + k * stride);
          x[k] = load_pack<X, P>(x_row + k * stride);
        }
      }
      // The slot's next row to L2 while this one is reduced: its loads then wait on L2, not DRAM
      // (one thread a 128-byte line asks).
      const std::int64_t next = row + t.rows_in_block;
      if (next < end && t.lane % kLinePacks<X, P> == 0) {
        const std::int64_t ahead = t.rows_in_block;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          if (k < packs) {
            prefetch_l2(dy_row + ahead * p.dy_row_stride + k * stride);
            prefetch_l2(x_row + ahead * p.x_row_stride + k * stride);
          }
        }
      }
      const float mean = packs > 0 ? p.mean[row] : 0.0f;
      const float r = packs > 0 ? p.rstd[row] : 0.0f;
      float sum_g_xhat = 0.0f, sum_g = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          const std::int64_t column = std::int64_t{t.first_pack} * P + k * stride;
          add_row_terms<X, W, P>(dy[k], x[k], param_pack<W, P>(p.weight, column), has_w, mean, r,
                                 sum_g_xhat, sum_g);
        }
      }
      sum_g_xhat = row_group_sum(sum_g_xhat, t.group, warp_sums[parity]);
      parity ^= 1;
      sum_g = row_group_sum(sum_g, t.group, warp_sums[parity]);
      parity ^= 1;
      if (packs == 0) continue;  // after both sums: every thread of the block takes part

      X* dx_row = static_cast<X*>(p.dx) + row * p.dx_row_stride + t.first_pack * P;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          const std::int64_t column = std::int64_t{t.first_pack} * P + k * stride;
          grad_pack<X, W, P>(dy[k], x[k], param_pack<W, P>(p.weight, column), has_w, mean, r,
                             sum_g_xhat / n, sum_g / n, acc_w[k], acc_b[k], dx_row + k * stride);
        }
      }
    }

    if (t.rows_in_block == 1) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < t.packs)
          store_partials<P>(p, g, std::int64_t{t.first_pack} * P + k * stride, acc_w[k], acc_b[k]);
      }
    } else if constexpr (K == 1) {
      float* slot_w = slot_sums;
      float* slot_b = slot_sums + kBwdBlockThreads * kBwdMaxPack;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        slot_w[threadIdx.x * P + i] = acc_w[0][i];
        slot_b[threadIdx.x * P + i] = acc_b[0][i];
      }
      __syncthreads();
      if (t.slot == 0 && t.packs > 0) {
        float total_w[P], total_b[P];
#pragma unroll
        for (int i = 0; i < P; ++i) {
          total_w[i] = slot_w[t.lane * P + i];
          total_b[i] = slot_b[t.lane * P + i];
          for (int s = 1; s < t.rows_in_block; ++s) {
            total_w[i] += slot_w[(s * t.group + t.lane) * P + i];
            total_b[i] += slot_b[(s * t.group + t.lane) * P + i];
          }
        }
        store_partials<P>(p, g, std::int64_t{t.first_pack} * P, total_w, total_b);
      }
      __syncthreads();  // slot_sums is rewritten at the next group's end
    }
  }
}

// Rows too long for registers: one 512-thread CTA a dW group (one an SM: 128 registers a thread
// hold a 16-byte pack's accumulators and the chunk's packs without spilling), in chunks of
// kBwdChunkRows rows.
// First each row's two sums (its dy and x marked "evict last" in L2), then column by column over
// the chunk (the reread, "evict first"): dx, and the columns' dW and dB sums in row order, carried
// from chunk to chunk in the group's partial rows (each element written and reread by one thread).
template <typename X, typename W, int P>
__global__ void __launch_bounds__(kStreamThreads, 1)
    layer_norm_bwd_streaming_kernel(const BwdParams p) {
  using Math = math::LayerNorm<X, W, X>;
  constexpr int kUnroll = 2;  // packs of dy and of x in flight a thread in the sums
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = blockDim.x;
  const bool has_w = p.weight != nullptr;
  const float n = static_cast<float>(p.hidden);
  const std::uint64_t reread = l2_evict_last_policy();
  const std::uint64_t last_read = l2_evict_first_policy();

  __shared__ float warp_sums[2][kStreamThreads / kWarpSize];
  __shared__ float chunk_stats[kBwdChunkRows][4];  // mean, rstd, mean(g * xhat), mean(g)
  int parity = 0;
  for (std::int64_t g = blockIdx.x; g < p.groups.groups; g += gridDim.x) {
    const std::int64_t begin = g * p.groups.rows_per_group;
    const std::int64_t end = min(begin + p.groups.rows_per_group, p.rows);
    for (std::int64_t chunk = begin; chunk < end; chunk += kBwdChunkRows) {
      const int chunk_rows = static_cast<int>(min(std::int64_t{kBwdChunkRows}, end - chunk));
      for (int c = 0; c < chunk_rows; ++c) {
        const std::int64_t row = chunk + c;
        const X* dy_row = static_cast<const X*>(p.dy) + row * p.dy_row_stride;
        const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
        const float mean = p.mean[row], r = p.rstd[row];
        float sum_g_xhat = 0.0f, sum_g = 0.0f;
        for (std::int64_t base = threadIdx.x; base < packs; base += kUnroll * step) {
          Pack<X, P> dy[kUnroll], x[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t pack = base + u * step;
            if (pack < packs) {
              dy[u] = load_pack_hinted<X, P>(dy_row + pack * P, reread);
              x[u] = load_pack_hinted<X, P>(x_row + pack * P, reread);
            }
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t pack = base + u * step;
            if (pack < packs) {
              add_row_terms<X, W, P>(dy[u], x[u], param_pack<W, P>(p.weight, pack * P), has_w, mean,
                                     r, sum_g_xhat, sum_g);
            }
          }
        }
        sum_g_xhat = row_group_sum(sum_g_xhat, static_cast<int>(step), warp_sums[parity]);
        parity ^= 1;
        sum_g = row_group_sum(sum_g, static_cast<int>(step), warp_sums[parity]);
        parity ^= 1;
        if (threadIdx.x == 0) {
          chunk_stats[c][0] = mean;
          chunk_stats[c][1] = r;
          chunk_stats[c][2] = sum_g_xhat / n;
          chunk_stats[c][3] = sum_g / n;
        }
      }
      __syncthreads();

      for (std::int64_t pack = threadIdx.x; pack < packs; pack += step) {
        const std::int64_t column = pack * P;
        float acc_w[P], acc_b[P];
#pragma unroll
        for (int i = 0; i < P; ++i) {
          const bool carried = chunk != begin;  // this thread's own earlier write
          acc_w[i] = carried && p.dw_partials ? p.dw_partials[g * p.hidden + column + i] : 0.0f;
          acc_b[i] = carried && p.db_partials ? p.db_partials[g * p.hidden + column + i] : 0.0f;
        }
        const Pack<W, P> w = param_pack<W, P>(p.weight, column);
        Pack<X, P> dy[kBwdChunkRows], x[kBwdChunkRows];
#pragma unroll
        for (int c = 0; c < kBwdChunkRows; ++c) {
          if (c < chunk_rows) {
            const std::int64_t row = chunk + c;
            dy[c] = load_pack_hinted<X, P>(
                static_cast<const X*>(p.dy) + row * p.dy_row_stride + column, last_read);
            x[c] = load_pack_hinted<X, P>(
                static_cast<const X*>(p.x) + row * p.x_row_stride + column, last_read);
          }
        }
#pragma unroll
        for (int c = 0; c < kBwdChunkRows; ++c) {
          if (c < chunk_rows) {
            const std::int64_t row = chunk + c;
            grad_pack<X, W, P>(dy[c], x[c], w, has_w, chunk_stats[c][0], chunk_stats[c][1],
                               chunk_stats[c][2], chunk_stats[c][3], acc_w, acc_b,
                               static_cast<X*>(p.dx) + row * p.dx_row_stride + column);
          }
        }
        store_partials<P>(p, g, column, acc_w, acc_b);
      }
      __syncthreads();  // chunk_stats is rewritten by the next chunk
    }
  }
}

}  // namespace tigon::cuda::layer_norm
