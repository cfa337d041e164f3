// RMSNorm forward kernels. Per-element arithmetic is math::RmsNorm (shared with the CPU backend);
// these kernels only move data and add. A row's sum of squares is reduced in a fixed order that
// depends on the RowSplit alone.
#pragma once

#include <cstdint>
#include <type_traits>

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

// y[j] for the P elements of one pack, from x and the weight pack w (both in registers).
template <typename Math, int P>
__device__ __forceinline__ void normalize_pack(const Pack<typename MathTraits<Math>::X, P>& x,
                                               const Pack<typename MathTraits<Math>::W, P>& w,
                                               float offset, float r,
                                               typename MathTraits<Math>::Y* y) {
  using T = MathTraits<Math>;
  typename T::Y out[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float scale = T::kAffine ? Math::scale(w.at(i), offset) : 1.0f;
    out[i] = Math::output(Math::normalized(x.value(i), r), scale);
  }
  store_pack<typename T::Y, P>(y, out);
}

// Adds the sums of the upper half of a row's `group` threads onto the lower half's, returning 0 to
// the upper half (then the row's reduction over all `group` threads adds the lower half's values
// in the order it would over group / 2 threads: x + 0 == x exactly). `half` is group / 2 floats of
// shared memory; the row's reduction that follows holds a block barrier, so the next row may
// rewrite it.
__device__ __forceinline__ float fold_upper_half(float v, int lane, int group, float* half) {
  const int h = group / 2;
  if (lane >= h) half[lane - h] = v;
  __syncthreads();
  return lane < h ? v + half[lane] : 0.0f;
}

// One row block's step once this thread's packs x[k], k < packs, are in registers (packs = 0 for
// a slot past the last row): the row's sum of squares over its group (and cluster), rstd, y.
// Every thread of the block (and cluster) must call it, in the same order. The sum's order: each
// pack's P terms in order, added on to a running sum a thread; the 8-pack kernel keeps two running
// sums, over its even and its odd k, and adds them (the odd one onto the even one), which is what
// the light kernel with p.fold_half computes for the same row (FwdConfig::fold_half). kWeightEarly:
// the weight packs are loaded before the reduction, so their latency hides behind it instead of
// following it (K more packs of registers: kFwdWeightEarlyPacks).
template <typename Math, int P, int K, bool kWeightEarly, bool kSliced>
__device__ __forceinline__ void normalize_row(const FwdParams& p, const ThreadShare& t,
                                              std::int64_t row,
                                              const Pack<typename MathTraits<Math>::X, P> (&x)[K],
                                              int packs, RowSum<kSliced>& row_sum,
                                              float* fold_buffer) {
  using T = MathTraits<Math>;
  using W = typename T::W;
  using Y = typename T::Y;
  const int stride = t.group * P;  // elements between a thread's consecutive packs
  const W* weight = T::kAffine ? static_cast<const W*>(p.weight) + t.first_pack * P : nullptr;
  const RowWeights<Math, P, K, kWeightEarly> w(weight, stride, packs);
  float sums[2] = {0.0f, 0.0f};
  constexpr int kChains = K == kFwdPacksPerThread ? 2 : 1;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k < packs) {
#pragma unroll
      for (int i = 0; i < P; ++i) sums[k % kChains] += Math::square(x[k].value(i));
    }
  }
  float sum = kChains == 2 ? sums[0] + sums[1] : sums[0];
  if constexpr (K == kLightPacksPerThread) {
    if (p.fold_half) sum = fold_upper_half(sum, t.lane, t.group, fold_buffer);
  }
  sum = row_sum(sum, t.group, row < p.rows ? row : -1);
  if (row >= p.rows) return;
  if constexpr (kSliced) {
    if (p.slice_sums.pass == SlicePass::kPublish) return;
  }

  const float r = Math::rstd(sum, p.hidden, p.eps);
  if (t.lane == 0 && t.slice == 0) p.rstd[row] = r;
  Y* y_row = static_cast<Y*>(p.y) + row * p.y_row_stride + t.first_pack * P;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k < packs) normalize_pack<Math, P>(x[k], w[k], p.offset, r, y_row + k * stride);
  }
}

// Rows held in registers: each thread keeps up to K packs of its row slice, so x is read once and
// y written once. Several rows per block for short rows; one row per block, or per cluster of
// blocks (sm_90), for long ones. Blocks loop over row blocks, so any row count works. K is
// kFwdPacksPerThread, or kLightPacksPerThread for the light kernel: 64 registers at most (1024
// threads an SM); the split must give each thread at most K packs. kSliced: the split has slices
// (the 8-pack kernel only); rows of one CTA run without the slice code (RowSum<false>).
// kResidual (fused_add_rms_norm): the row is h = x + residual, formed as the packs arrive and
// stored to h before the reduction (not by SlicePass's publishing pass, which the gathering pass
// repeats: h may alias x or residual); plain RMSNorm compiles none of it.
template <typename Math, int P, int K = kFwdPacksPerThread, bool kSliced = false,
          bool kResidual = false>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    rms_norm_fwd_kernel(const FwdParamsOf<kResidual> p) {
  static_assert(!kSliced || K == kFwdPacksPerThread, "only the 8-pack kernel takes slices");
  using X = typename MathTraits<Math>::X;
  constexpr bool kWeightEarly =
      K == kFwdWeightEarlyPacks && sizeof(typename MathTraits<Math>::W) == 2;
  const ThreadShare t = thread_share<K>(p.split);
  const int stride = t.group * P;

  __shared__ RowSumShared row_sum_shared;
  __shared__ float fold_buffer[K == kLightPacksPerThread ? kMaxRowThreads / 2 : 1];
  RowSum<kSliced> row_sum(row_sum_shared, p.split, p.slice_sums, t);
  for (std::int64_t row0 = t.unit * t.rows_in_block; row0 < p.rows;
       row0 += t.units * t.rows_in_block) {
    const std::int64_t row = row0 + t.slot;
    const int packs = row < p.rows ? t.packs : 0;
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride + t.first_pack * P;
    Pack<X, P> x[K];
    if constexpr (kResidual) {
      // Each pack of h formed as soon as its x and residual packs arrive keeps the 8-pack kernel
      // within its registers for float32 and bf16 x; fp16 x spills that way (150-200 bytes, ptxas
      // -v for sm_90, 2026-12-07) and not when every x pack is loaded first.
      constexpr bool kPackByPack = !std::is_same_v<X, math::Half>;
      const X* residual_row =
          static_cast<const X*>(p.residual) + row * p.residual_row_stride + t.first_pack * P;
      X* h_row = static_cast<X*>(p.h) + row * p.h_row_stride + t.first_pack * P;
      bool store_h = true;
      if constexpr (kSliced) store_h = p.slice_sums.pass != SlicePass::kPublish;
      if constexpr (!kPackByPack) {
#pragma unroll
        for (int k = 0; k < K; ++k) {
          if (k < packs) x[k] = load_pack<X, P>(x_row + k * stride);
        }
      }
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) {
          x[k] = add_residual_pack<X, P>(kPackByPack ? load_pack<X, P>(x_row + k * stride) : x[k],
                                         load_pack<X, P>(residual_row + k * stride),
                                         h_row + k * stride, store_h);
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) x[k] = load_pack<X, P>(x_row + k * stride);
      }
    }
    normalize_row<Math, P, K, kWeightEarly>(p, t, row, x, packs, row_sum, fold_buffer);
  }
  if constexpr (kSliced) {
    if (p.split.slices > 1 && p.slice_sums.pass == SlicePass::kCluster) cluster_barrier();
  }
}

// Rows too long for registers (and no cluster big enough), and 16-bit rows of 48-128 KB
// (FwdConfig): one row per block, read twice. The second read usually hits L2, since the block read
// the same row a moment before; the first read marks the row "evict last" in L2 and the second
// "evict first", so the streaming writes of y do not push rows still to be re-read out. kUnroll
// packs in flight per thread: 4 (62 registers, two CTAs an SM) or 2 (40 registers without spills,
// three CTAs an SM: more rows in flight at once, fewer bytes each).
// kResidual (fused_add_rms_norm): the first pass reads x and residual once ("evict first") and
// stores h = x + residual, kUnroll / 2 packs of each in flight (the same bytes, and registers
// without spills; a thread's packs are summed in the same order whatever the unroll); the second
// pass reads h back (from L2, written a moment before).
template <typename Math, int P, int kUnroll, bool kResidual = false>
__global__ void __launch_bounds__(kTwoPassThreads, kUnroll >= 4 ? 2 : 3)
    rms_norm_fwd_two_pass_kernel(const FwdParamsOf<kResidual> p) {
  using T = MathTraits<Math>;
  using X = typename T::X;
  using W = typename T::W;
  using Y = typename T::Y;
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);

  __shared__ float warp_sums[2][kTwoPassThreads / kWarpSize];
  const std::uint64_t reread = l2_evict_last_policy();
  const std::uint64_t last_read = l2_evict_first_policy();
  int parity = 0;
  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
    float sum = 0.0f;
    constexpr int kFirstUnroll = kResidual ? kUnroll / 2 : kUnroll;
    for (std::int64_t base = threadIdx.x; base < packs; base += kFirstUnroll * step) {
      Pack<X, P> x[kFirstUnroll];
      if constexpr (kResidual) {
        const X* residual_row = static_cast<const X*>(p.residual) + row * p.residual_row_stride;
        Pack<X, P> residual[kFirstUnroll];
#pragma unroll
        for (int u = 0; u < kFirstUnroll; ++u) {
          if (base + u * step < packs) {
            x[u] = load_pack_hinted<X, P>(x_row + (base + u * step) * P, last_read);
            residual[u] = load_pack_hinted<X, P>(residual_row + (base + u * step) * P, last_read);
          }
        }
        X* h_row = static_cast<X*>(p.h) + row * p.h_row_stride;
#pragma unroll
        for (int u = 0; u < kFirstUnroll; ++u) {
          if (base + u * step < packs)
            x[u] = add_residual_pack<X, P>(x[u], residual[u], h_row + (base + u * step) * P, true);
        }
      } else {
#pragma unroll
        for (int u = 0; u < kFirstUnroll; ++u) {
          if (base + u * step < packs)
            x[u] = load_pack_hinted<X, P>(x_row + (base + u * step) * P, reread);
        }
      }
#pragma unroll
      for (int u = 0; u < kFirstUnroll; ++u) {
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
    if constexpr (kResidual) x_row = static_cast<const X*>(p.h) + row * p.h_row_stride;
    for (std::int64_t base = threadIdx.x; base < packs; base += kUnroll * step) {
      Pack<X, P> x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * step < packs)
          x[u] = load_pack_hinted<X, P>(x_row + (base + u * step) * P, last_read);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::int64_t pack = base + u * step;
        if (pack < packs) {
          normalize_pack<Math, P>(x[u], weight_pack<Math, P>(weight + pack * P), p.offset, r,
                                  y_row + pack * P);
        }
      }
    }
  }
}

}  // namespace tigon::cuda::rms_norm
