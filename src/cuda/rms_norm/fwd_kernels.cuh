// RMSNorm forward kernels. Per-element arithmetic is math::RmsNorm (shared with the CPU backend);
// these kernels only move data and add. A row's sum of squares is reduced in a fixed order that
// depends on the RowSplit alone.
#pragma once

#include <cstdint>

#include "cuda/common/l2_policy.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "cuda/rms_norm/pack_ring.cuh"
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

// One row block's step once this thread's packs x[k], k < packs, are in registers (packs = 0 for
// a slot past the last row): the row's sum of squares over its group (and cluster), rstd, y.
// Every thread of the block (and cluster) must call it, in the same order. kWeightEarly: the
// weight packs are loaded before the reduction, so their latency hides behind it instead of
// following it (K more packs of registers: kFwdWeightEarlyPacks).
template <typename Math, int P, int K, bool kWeightEarly = false>
__device__ __forceinline__ void normalize_row(const FwdParams& p, const ThreadShare& t,
                                              std::int64_t row,
                                              const Pack<typename MathTraits<Math>::X, P> (&x)[K],
                                              int packs, RowSum& row_sum) {
  using T = MathTraits<Math>;
  using W = typename T::W;
  using Y = typename T::Y;
  const int stride = t.group * P;  // elements between a thread's consecutive packs
  const W* weight = T::kAffine ? static_cast<const W*>(p.weight) + t.first_pack * P : nullptr;
  const RowWeights<Math, P, K, kWeightEarly> w(weight, stride, packs);
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (k < packs) {
#pragma unroll
      for (int i = 0; i < P; ++i) sum += Math::square(x[k].value(i));
    }
  }
  sum = row_sum(sum, t.group);
  if (row >= p.rows) return;

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
// blocks (sm_90), for long ones. Blocks loop over row blocks, so any row count works; with
// p.prefetch (on a persistent grid) each row block's loads are followed by L2 prefetches of the
// block's next one. K is kFwdPacksPerThread, or 4 or 2 for the light kernel
// (Tuning::fwd_light_packs_per_thread): 64 registers at most (1024 threads an SM), 40 with 2 packs
// (1536); the split must give each thread at most K packs.
template <typename Math, int P, int K = kFwdPacksPerThread>
__global__ void __launch_bounds__(kMaxRowThreads, K <= 2 ? 3 : 2)
    rms_norm_fwd_kernel(const FwdParams p) {
  using X = typename MathTraits<Math>::X;
  constexpr bool kWeightEarly =
      K == kFwdWeightEarlyPacks && sizeof(typename MathTraits<Math>::W) == 2;
  const ThreadShare t = thread_share<K>(p.split);
  const int stride = t.group * P;

  __shared__ RowSumShared row_sum_shared;
  RowSum row_sum(row_sum_shared, p.split, p.cluster_exchange);
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
    if (p.prefetch && row + t.units * t.rows_in_block < p.rows) {
      const std::int64_t ahead = t.units * t.rows_in_block * p.x_row_stride;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) prefetch_l2(x_row + ahead + k * stride);
      }
    }
    normalize_row<Math, P, K, kWeightEarly>(p, t, row, x, packs, row_sum);
  }
  if (p.split.slices > 1) cluster_barrier();
}

// The register kernel on a persistent grid with x staged through shared memory: each CTA keeps
// p.stages - 1 row blocks in flight (bulk copies, pack_ring.cuh) while it normalizes the current
// one, so memory never waits for a row's reduction. Same split, same sums in the same order, hence
// the same bits as the 8-pack rms_norm_fwd_kernel (not as the light kernel, whose 4 packs a thread
// add a row's terms in another order: rows that one takes by default can change in the last bit
// with fwd_stages). Needs sm_90, 16-byte packs of x (P elements) and
// p.stages >= 2; dynamic shared memory PackRing<X, P, K>::bytes(p.stages, blockDim.x).
template <typename Math, int P>
__global__ void __launch_bounds__(kMaxRowThreads, 1) rms_norm_fwd_staged_kernel(const FwdParams p) {
  using X = typename MathTraits<Math>::X;
  using Ring = PackRing<X, P, kFwdPacksPerThread>;
  constexpr int K = kFwdPacksPerThread;
  const ThreadShare t = thread_share<K>(p.split);
  const int stages = p.stages;
  const std::int64_t step = t.units * t.rows_in_block;
  extern __shared__ __align__(16) unsigned char ring_bytes[];
  const Ring ring{reinterpret_cast<X*>(ring_bytes)};
  __shared__ RingBarriers ring_barriers;
  RingPhases ring_phases(ring_barriers, stages, t.rows_in_block);
  __syncthreads();
  const X* x_base = static_cast<const X*>(p.x) + t.first_pack * P;
  const bool leader = t.lane == 0;
  // The row block at row0 into slot `stage`: each row slot's leader announces its bytes (none
  // past the last row) and copies them, so every fill completes its slot's phase.
  const auto fetch = [&](int stage, std::int64_t row0) {
    if (!leader) return;
    const std::int64_t row = row0 + t.slot;
    const unsigned barrier = ring_phases.barrier(stage);
    mbarrier_arrive_expect_tx(barrier, row < p.rows ? Ring::slot_bytes(t) : 0u);
    if (row < p.rows) ring.fill(stage, x_base + row * p.x_row_stride, t, barrier);
  };

  __shared__ RowSumShared row_sum_shared;
  RowSum row_sum(row_sum_shared, p.split, p.cluster_exchange);
  std::int64_t row0 = t.unit * t.rows_in_block;
  for (int s = 0; s + 1 < stages; ++s) fetch(s, row0 + s * step);
  for (int stage = 0; row0 < p.rows; row0 += step, stage = stage + 1 == stages ? 0 : stage + 1) {
    // The slot consumed by the previous row block takes the one stages - 1 blocks ahead, once
    // every thread has read its packs out of it.
    __syncthreads();
    fetch(stage == 0 ? stages - 1 : stage - 1, row0 + (stages - 1) * step);
    ring_phases.wait(stage);
    const std::int64_t row = row0 + t.slot;
    const int packs = row < p.rows ? t.packs : 0;
    Pack<X, P> x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < packs) x[k] = ring.read(stage, k);
    }
    normalize_row<Math, P, K>(p, t, row, x, packs, row_sum);
  }
  if (p.split.slices > 1) cluster_barrier();
}

// Rows too long for registers (and no cluster big enough), or that the tuning streams (fwd_two_pass
// in layout.cuh): one row per block, read twice. The second read usually hits L2, since the block
// read the same row a moment before; with p.l2_hints the first read marks the row "evict last" and
// the second "evict first", so the streaming writes of y do not push rows still to be re-read out.
// kUnroll packs in flight per thread: 4 (62 registers, two CTAs an SM) or 2 (40 registers without
// spills, three CTAs an SM: more rows in flight at once, fewer bytes each; Tuning::
// fwd_two_pass_unroll). kThreads 1024 with 1 pack a thread (32 registers, two CTAs an SM: every
// warp slot filled, as Inductor's kernel for these rows; Tuning::fwd_two_pass_threads).
template <typename Math, int P, int kUnroll, int kThreads = kTwoPassThreads>
__global__ void __launch_bounds__(kThreads, kThreads >= 1024 || kUnroll >= 4 ? 2 : 3)
    rms_norm_fwd_two_pass_kernel(const FwdParams p) {
  using T = MathTraits<Math>;
  using X = typename T::X;
  using W = typename T::W;
  using Y = typename T::Y;
  const std::int64_t packs = p.split.packs;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x);

  __shared__ float warp_sums[2][kThreads / kWarpSize];
  const std::uint64_t reread = p.l2_hints ? l2_evict_last_policy() : l2_evict_normal_policy();
  const std::uint64_t last_read = p.l2_hints ? l2_evict_first_policy() : l2_evict_normal_policy();
  int parity = 0;
  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const X* x_row = static_cast<const X*>(p.x) + row * p.x_row_stride;
    float sum = 0.0f;
    for (std::int64_t base = threadIdx.x; base < packs; base += kUnroll * step) {
      Pack<X, P> x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * step < packs)
          x[u] = load_pack_hinted<X, P>(x_row + (base + u * step) * P, reread);
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
