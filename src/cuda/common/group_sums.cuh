// Several float sums at once over the threads that share a row, in a FIXED order (the butterfly
// of reduce.cuh's lane_group_sum within a warp, then the warps in order): one barrier for all N
// values instead of one each. Same inputs and group size, same bits.
#pragma once

#include "cuda/common/reduce.cuh"

namespace tigon::cuda {

// Sums each of v[0..N) over the `group` consecutive threads [k * group, (k + 1) * group) and
// returns the totals to all of them in v. `group` is a power of two up to 32 or a multiple of 32
// dividing blockDim.x. `scratch`: N * blockDim.x / 32 floats of shared memory. Every thread of
// the block must call it; it ends with a barrier, so consecutive calls may reuse `scratch`.
template <int N>
__device__ __forceinline__ void row_group_sums(float (&v)[N], int group, float* scratch) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = lane_group_sum(v[i], group < kWarpSize ? group : kWarpSize);
  if (group <= kWarpSize) return;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) scratch[i * warps + warp] = v[i];
  }
  __syncthreads();
  const int warps_per_group = group / kWarpSize;
  const int first = warp / warps_per_group * warps_per_group;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float total = scratch[i * warps + first];
    for (int w = 1; w < warps_per_group; ++w) total += scratch[i * warps + first + w];
    v[i] = total;
  }
  __syncthreads();
}

}  // namespace tigon::cuda
