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
};

template <int K>
__device__ __forceinline__ ThreadShare thread_share(const RowSplit& s) {
  ThreadShare t;
  t.group = s.threads_per_row;
  t.slot = static_cast<int>(threadIdx.x) / t.group;
  t.lane = static_cast<int>(threadIdx.x) - t.slot * t.group;
  t.rows_in_block = static_cast<int>(blockDim.x) / t.group;
  t.slice = static_cast<int>(blockIdx.x) % s.slices;
  t.unit = blockIdx.x / s.slices;
  t.units = gridDim.x / s.slices;
  t.first_pack = t.slice * s.slice_packs + t.lane;
  const int end_pack =
      static_cast<int>(min(static_cast<std::int64_t>(t.slice + 1) * s.slice_packs, s.packs));
  t.packs = t.first_pack < end_pack ? min(K, (end_pack - t.first_pack + t.group - 1) / t.group) : 0;
  return t;
}

}  // namespace tigon::cuda::rms_norm
