// LayerNorm forward kernels. Per-element arithmetic is math::LayerNorm (shared with the CPU
// backend); these kernels only move data and add. A row's two sums (of x, then of (x - mean)^2
// around that mean) are reduced in a fixed order that depends on the config alone.
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

// y for the P elements of one pack (x, weight and bias packs in registers).
template <typename X, typename W, typename B, int P>
__device__ __forceinline__ void normalize_pack(const Pack<X, P>& x, const Pack<W, P>& w,
                                               const Pack<B, P>& b, bool has_w, bool has_b,
                                               float mean, float r, X* y) {
  using Math = math::LayerNorm<X, W, B>;
  X out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    out[i] = Math::output(Math::normalized(x.value(i), mean, r), param_value(w, i, has_w, 1.0f),
                          param_value(b, i, has_b, 0.0f));
  }
  store_pack_global<X, P>(y, out);
}

// Rows held in registers: each thread keeps up to K packs of its row (packs first_pack + k *
// group), so x is read once and y written once. Several rows a block for short rows, one row a
// block for long ones; blocks loop over row blocks. The sums: each thread adds its packs' elements
// in order (k, then i), then row_group_sum over the row's threads in a fixed tree.
template <typename X, typename W, typename B, int P>
__global__ void __launch_bounds__(rms_norm::kMaxRowThreads, 2)
    layer_norm_fwd_rows_kernel(const FwdParams p) {
  using Math = math::LayerNorm<X, W, B>;
  constexpr int K = kFwdPacksPerThread;
  const rms_norm::ThreadShare t = rms_norm::thread_share<K>(p.split);
  const int stride = t.group * P;  // elements between a thread's consecutive packs
  const bool has_w = p.weight != nullptr, has_b = p.bias != nullptr;

  __shared__ float warp_sums[2][rms_norm::kMaxRowThreads / kWarpSize];
  int parity = 0;
  for (std::int64_t row0 = t.unit * t.rows_in_block; row0 < p.rows;
       row0 += t.units * t.rows_in_block) {
    const std::int64_t row = row0 + t.slot;
    const int packs = row < p.rows ? t.packs : 0;
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + t.first_pack * P;
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
        for (int i = 0; i < P; ++i) sum += x[k].value(i);
      }
    }
    sum = row_group_sum(sum, t.group, warp_sums[parity]);
    parity ^= 1;
    const float mean = Math::mean(sum, p.hidden);
    float squares = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) {
#pragma unroll
        for (int i = 0; i < P; ++i) squares += Math::centered_square(x[k].value(i), mean);
      }
    }
    squares = row_group_sum(squares, t.group, warp_sums[parity]);
    parity ^= 1;
    if (row >= p.rows) continue;  // after both sums: every thread of the block takes part

    const float r = Math::rstd(squares, p.hidden, p.eps);
    if (t.lane == 0) {
      p.mean[row] = mean;
      p.rstd[row] = r;
    }
    X* y_row = static_cast<X*>(p.y) + row * p.y_row_stride + t.first_pack * P;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) {
        const std::int64_t column = std::int64_t{t.first_pack} * P + k * stride;
        normalize_pack<X, W, B, P>(x[k], param_pack<W, P>(p.weight, column),
                                   param_pack<B, P>(p.bias, column), has_w, has_b, mean, r,
                                   y_row + k * stride);
      }
    }
  }
}

// Packs in flight a thread of the streaming kernel.
inline constexpr int kStreamUnroll = 4;

// A row's sum over the streaming kernel's block of term(x) for each element, each thread over its
// packs (tid, tid + step, ...) in order, kStreamUnroll loads in flight.
template <typename X, int P, typename Term>
__device__ __forceinline__ float stream_row_sum(const X* x_row, std::int64_t packs,
                                                std::uint64_t policy, Term term, float* scratch) {
  const std::int64_t step = blockDim.x;
  float sum = 0.0f;
  for (std::int64_t base = threadIdx.x; base < packs; base += kStreamUnroll * step) {
    Pack<X, P> x[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (base + u * step < packs)
        x[u] = load_pack_hinted<X, P>(x_row + (base + u * step) * P, policy);
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (base + u * step < packs) {
#pragma unroll
        for (int i = 0; i < P; ++i) sum += term(x[u].value(i));
      }
    }
  }
  return row_group_sum(sum, static_cast<int>(blockDim.x), scratch);
}

// Rows too long for registers: one row a block, read three times (sum, centered sum, y). The
// first two reads mark the row "evict last" in L2 and the third "evict first", so the rereads hit
// L2 and the streaming writes of y do not push out rows still to be reread.
template <typename X, typename W, typename B, int P>
__global__ void __launch_bounds__(kStreamThreads, 2)
    layer_norm_fwd_streaming_kernel(const FwdParams p) {
  using Math = math::LayerNorm<X, W, B>;
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = blockDim.x;
  const bool has_w = p.weight != nullptr, has_b = p.bias != nullptr;
  __shared__ float warp_sums[2][kStreamThreads / kWarpSize];
  const std::uint64_t reread = l2_evict_last_policy();
  const std::uint64_t last_read = l2_evict_first_policy();
  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
    const float mean =
        Math::mean(stream_row_sum<X, P>(
                       x_row, packs, reread, [](float v) { return v; }, warp_sums[0]),
                   p.hidden);
    const float squares = stream_row_sum<X, P>(
        x_row, packs, reread, [mean](float v) { return Math::centered_square(v, mean); },
        warp_sums[1]);
    const float r = Math::rstd(squares, p.hidden, p.eps);
    if (threadIdx.x == 0) {
      p.mean[row] = mean;
      p.rstd[row] = r;
    }
    X* y_row = static_cast<X*>(p.y) + row * p.y_row_stride;
    for (std::int64_t base = threadIdx.x; base < packs; base += kStreamUnroll * step) {
      Pack<X, P> x[kStreamUnroll];
#pragma unroll
      for (int u = 0; u < kStreamUnroll; ++u) {
        if (base + u * step < packs)
          x[u] = load_pack_hinted<X, P>(x_row + (base + u * step) * P, last_read);
      }
#pragma unroll
      for (int u = 0; u < kStreamUnroll; ++u) {
        const std::int64_t pack = base + u * step;
        if (pack < packs) {
          normalize_pack<X, W, B, P>(x[u], param_pack<W, P>(p.weight, pack * P),
                                     param_pack<B, P>(p.bias, pack * P), has_w, has_b, mean, r,
                                     y_row + pack * P);
        }
      }
    }
  }
}

}  // namespace tigon::cuda::layer_norm
