// Where a thread of the RMSNorm row kernels sits in the RowSplit (layout.cuh): its row slot in the
// block, its lane in the row's group, its CTA's column slice, and which packs of a row it owns.
#pragma once

#include <cstdint>

#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {

struct ThreadShare {
  int group;          // threads per row (per slice with a cluster)
  int slot;           // this thread's row slot in the block
  int lane;           // this thread's place in the row's group
  int rows_in_block;  // row slots per block
  int slice;          // this CTA's rank in its cluster (0 without one)
  std::int64_t unit;  // this block's (or cluster's) index, and how many there are
  std::int64_t units;
  // This thread's packs of a row: first_pack + k * group for k < packs (fewer than K at the end).
  int first_pack;
  int packs;
  int slice_packs;  // packs of a row in this CTA's slice (the whole row without a cluster)
};

// Integer division compiles to a dozen instructions through the XU pipe, which the light forward
// kernel (short rows, 16-32 elements a thread) cannot hide, so the common cases shift:
// slices are powers of two, and so are threads_per_row up to 64 (above, one row a block unless a
// tuning asks for bigger blocks).
template <int K>
__device__ __forceinline__ ThreadShare thread_share(const RowSplit& s) {
  ThreadShare t;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  t.group = s.threads_per_row;
  if ((t.group & (t.group - 1)) == 0) {
    const int shift = __ffs(t.group) - 1;
    t.slot = tid >> shift;
    t.rows_in_block = threads >> shift;
  } else {
    t.slot = tid / t.group;
    t.rows_in_block = threads / t.group;
  }
  t.lane = tid - t.slot * t.group;
  const int slice_shift = __ffs(s.slices) - 1;
  t.slice = static_cast<int>(blockIdx.x) & (s.slices - 1);
  t.unit = blockIdx.x >> slice_shift;
  t.units = gridDim.x >> slice_shift;
  t.first_pack = t.slice * s.slice_packs + t.lane;
  const int end_pack =
      static_cast<int>(min(static_cast<std::int64_t>(t.slice + 1) * s.slice_packs, s.packs));
  t.slice_packs = end_pack - t.slice * s.slice_packs;
  t.packs = 0;  // min(K, ceil((end_pack - first_pack) / group)), or 0 past the end
#pragma unroll
  for (int k = 0; k < K; ++k) t.packs += t.first_pack + k * t.group < end_pack ? 1 : 0;
  return t;
}

}  // namespace tigon::cuda::rms_norm
