// The one-read cross-entropy row kernel: each row is split into p.cluster contiguous slices, one
// per CTA of a thread-block cluster (sm_90; a lone CTA when p.cluster == 1), and every slice
// lives whole in its CTA's shared memory, so the logits are read from memory exactly once:
//  load   the slice with 16-byte cp.async copies, one pack per thread and step, all in flight;
//  pass 1 per-thread online max / sum of exp, smoothing sum and target logit over the thread's
//         packs, merged over the CTA in a fixed order, then over the cluster's CTAs in rank order
//         through distributed shared memory: every CTA of the cluster gets the same bits;
//  pass 2 (kLossGrad) the gradient from the shared copy, written to global memory (possibly over
//         the logits: no thread reads them back from global memory).
// Clusters are persistent and stride over rows. A CTA holds one row (`stages`); every thread reads
// only the shared-memory packs it copied itself, so a pack's slot is refilled with the next row as
// soon as it has been consumed (pass 2, or pass 1 without a gradient): the next row streams in
// while this one is computed, and no CTA-wide barrier guards the slices.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/cross_entropy/row_math.cuh"
#include "cuda/cross_entropy/row_params.h"
#include "cuda/cross_entropy/slice_plan.h"
#include "math/cross_entropy.h"

namespace tigon::cuda::cross_entropy {

static_assert(kMaxCluster <= kMaxPortableCluster, "the cluster folds have a slot per CTA");
static_assert(tigon::detail::kSliceFloatsPerRow >= kRowKernelAboveCluster * (4 + 2),
              "slice_states holds a state and an argmax for each CTA of a row");

inline constexpr int kSliceThreads = 256;
// Slices are sized so that this many CTAs fit on an SM (3 x 64 KB of the 228 KB of an H100/H200),
// which bounds registers to 85 a thread.
inline constexpr int kSliceBlocksPerSm = 3;

// The folds of the CTAs' results of a row over a cluster (or through RowParams::slice_states).
__device__ __forceinline__ float4 merge_states(float4 a, float4 b) {
  PartState s = PartState::unpacked(a);
  s.merge(PartState::unpacked(b));
  return s.packed();
}

__device__ __forceinline__ float2 merge_bests(float2 a, float2 b) {
  math::Argmax<int> s = unpacked(a);
  s.merge(unpacked(b));
  return packed(s);
}

// Slice results in global memory one float at a time (the workspace is only 4-byte aligned).
__device__ __forceinline__ void store_floats(float* dst, float4 v) {
  dst[0] = v.x;
  dst[1] = v.y;
  dst[2] = v.z;
  dst[3] = v.w;
}
__device__ __forceinline__ void store_floats(float* dst, float2 v) {
  dst[0] = v.x;
  dst[1] = v.y;
}
__device__ __forceinline__ float4 load_float4(const float* src) {
  return make_float4(src[0], src[1], src[2], src[3]);
}
__device__ __forceinline__ float2 load_float2(const float* src) {
  return make_float2(src[0], src[1]);
}

template <typename T, RowMode kMode, bool kPlain>
__global__ void __launch_bounds__(kSliceThreads, kSliceBlocksPerSm) ce_slice_kernel(RowParams p) {
  static_assert(kMode != RowMode::kGrad, "the recompute backward reads each row once already");
  constexpr int P = static_cast<int>(16 / sizeof(T));
  constexpr bool kWritesGrad = kMode == RowMode::kLossGrad;
  constexpr int B = kSliceThreads;
  extern __shared__ __align__(16) unsigned char slice_bytes[];
  __shared__ __align__(16) float scratch[kMergeScratchPerWarp * kSliceThreads / kWarpSize];
  // The cluster's CTAs' merged states, one slot each (two arrays: see cluster_fold).
  __shared__ float4 published[2][kMaxPortableCluster];
  __shared__ float2 best_scratch[kSliceThreads / kWarpSize];
  __shared__ float2 published_best[2][kMaxPortableCluster];  // with o.argmax
  T* const slice = reinterpret_cast<T*>(slice_bytes);

  const int cluster = p.cluster;
  const bool clustered = cluster > 1 && p.slice_pass == SlicePass::kCluster;
  // cluster_fold writes into peers: not before every CTA of the cluster has started.
  if (clustered) cluster_barrier();
  const std::int64_t packs = p.vocab / P;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x % cluster) * p.slice_packs;
  const std::int64_t count = first < packs ? min(p.slice_packs, packs - first) : 0;
  const int tid = static_cast<int>(threadIdx.x);
  // Step j of this thread: slice pack tid + j * B, i.e. row pack first + tid + j * B.
  const int steps = tid < count ? static_cast<int>((count - 1 - tid) / B) + 1 : 0;
  // Rows a CTA holds (the loops are written for any count; 2 measured no faster, 2026-12-05).
  constexpr int stages = 1;
  T* const mine = slice + static_cast<std::ptrdiff_t>(tid) * P;
  const std::ptrdiff_t stage_elems = static_cast<std::ptrdiff_t>(p.slice_packs) * P;
  const auto slot = [&](int stage, int j) { return mine + stage * stage_elems + j * B * P; };
  const std::int64_t row_step = gridDim.x / cluster;
  const RowOptions o = row_options<kPlain>(p);

  // One commit group per step and row, committed in row order, so a step's copy is complete once
  // at most the groups committed after it are pending.
  const auto load = [&](int stage, std::int64_t row, int j) {
    const T* x = static_cast<const T*>(p.logits) + row * p.logits_row_stride;
    async_copy_16(slot(stage, j), x + (first + tid + static_cast<std::int64_t>(j) * B) * P);
    async_commit();
  };
  std::int64_t row = blockIdx.x / cluster;
  for (int stage = 0; stage < stages; ++stage) {
    const std::int64_t r = row + stage * row_step;
    if (r >= p.rows) break;
    for (int j = 0; j < steps; ++j) load(stage, r, j);
  }

  // Launched as ce_prepare_kernel's dependent (cross_entropy.cu), this kernel may start before
  // prepare has written the header and the float32 class weights: the first rows' copies above
  // need neither.
  allow_dependent_launch();
  wait_for_prior_grid();
  const float scale_a = p.scales[2], scale_b = p.scales[3], weight_total = p.scales[4];
  int parity = 0;
  int stage = 0;
  std::int64_t y_next = row < p.rows ? p.target[row] : 0;
  for (; row < p.rows; row += row_step, stage = stage + 1 == stages ? 0 : stage + 1) {
    const std::int64_t next = row + row_step;
    // This stage's slots are refilled with `refill` as they are consumed.
    const std::int64_t refill = row + stages * row_step;
    const bool refills = refill < p.rows;
    // Rows after this one already committed (the other stages').
    const int ahead =
        static_cast<int>(min(static_cast<std::int64_t>(stages - 1), (p.rows - 1 - row) / row_step));
    const std::int64_t y = y_next;
    if (next < p.rows) y_next = p.target[next];  // needed at the next row's first pack
    const bool ignored = math::ce_ignored(y, p.ignore_index);
    const bool in_range = y >= 0 && y < p.vocab;
    const float w_y = target_weight(o, y, in_range);
    const TargetSlot ts = target_slot<P>(y, in_range);

    PartState st;
    math::Argmax<int> best;  // with o.argmax
    for (int j = 0; j < steps; ++j) {
      // Committed after step j: this row's later steps, the rows ahead, and (refilled in this
      // loop when there is no pass 2) the refill row's first j.
      const bool refill_now = !kWritesGrad && refills;
      async_wait_at_most(steps - 1 - j + ahead * steps + (refill_now ? j : 0));
      const Pack<T, P> pk = load_pack<T, P>(slot(stage, j));
      const std::int64_t k = first + tid + static_cast<std::int64_t>(j) * B;
      accumulate_pack<T, P>(st, best, pk, k, target_lane(ts, k), o);
      if (refill_now) load(stage, refill, j);
    }
    st = block_merge(st, scratch);
    if (o.argmax) best = block_argmax(best, best_scratch);
    if (clustered) {
      st = PartState::unpacked(cluster_fold(st.packed(), published[parity], cluster, merge_states));
      if (o.argmax) {
        best = unpacked(cluster_fold(packed(best), published_best[parity], cluster, merge_bests));
      }
      parity ^= 1;
    } else if (cluster > 1) {
      // Without a cluster (slice_pass.h): the first launch stores this CTA's results and moves
      // on; the second folds the row's, in rank order as cluster_fold does.
      float* const states = p.slice_states + row * tigon::detail::kSliceFloatsPerRow;
      float* const bests = states + 4 * cluster;
      const int rank = static_cast<int>(blockIdx.x % cluster);
      if (p.slice_pass == SlicePass::kPublish) {
        if (tid == 0) {
          store_floats(states + 4 * rank, st.packed());
          if (o.argmax) store_floats(bests + 2 * rank, packed(best));
        }
        continue;
      }
      float4 s = load_float4(states);
      for (int r = 1; r < cluster; ++r) s = merge_states(s, load_float4(states + 4 * r));
      st = PartState::unpacked(s);
      if (o.argmax) {
        float2 b = load_float2(bests);
        for (int r = 1; r < cluster; ++r) b = merge_bests(b, load_float2(bests + 2 * r));
        best = unpacked(b);
      }
    }
    const RowLoss l = row_loss<kPlain>(st, ignored, w_y, weight_total, p, row);
    if (first == 0 && tid == 0) {
      store_row(p, row, l);
      if (o.argmax) store_prediction(p, row, best, ignored, y);
    }

    if constexpr (kWritesGrad) {
      T* g = static_cast<T*>(p.grad) + row * p.grad_row_stride;
      float a = scale_a, b = scale_b;
      if constexpr (!kPlain) {
        a *= l.grad_factor;
        b *= l.grad_factor;
      }
      math::CeRow r = math::ce_row(l.lse, o.softcap, p.label_smoothing, p.lse_square_scale, w_y,
                                   weight_total, p.vocab, a, b);
      r.one_minus_p_y = l.one_minus_p_y;
      for (int j = 0; j < steps; ++j) {
        const std::int64_t k = first + tid + static_cast<std::int64_t>(j) * B;
        T out[P];
        if (ignored) {
#pragma unroll
          for (int i = 0; i < P; ++i) out[i] = math::from_float<T>(0.0f);
        } else {
          grad_pack<T, P>(load_pack<T, P>(slot(stage, j)), k, target_lane(ts, k), w_y, o, r, out);
        }
        store_pack_global<T, P>(g + k * P, out);
        if (refills) load(stage, refill, j);  // the slot's pack is consumed: refill it
      }
    }
  }
  if (clustered) cluster_barrier();  // peers may still access `published`
}

}  // namespace tigon::cuda::cross_entropy
