// Float sums across threads in a FIXED order, so the same inputs give the same bits whatever the
// grid: results depend only on how many threads share a row, never on timing or block placement.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

namespace tigon::cuda {

inline constexpr int kWarpSize = 32;

// Sum over aligned groups of `width` lanes (a power of two <= 32) by an xor butterfly. Every lane
// of a group ends with the same bits, because a + b == b + a exactly in IEEE arithmetic. All 32
// lanes of the warp must call it.
__device__ __forceinline__ float lane_group_sum(float v, int width) {
  for (int offset = width / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the `group` consecutive threads [k * group, (k + 1) * group) that share a row, returned
// to all of them. `group` is a power of two up to 32 or a multiple of 32 dividing blockDim.x.
// Above 32, warp totals go through `scratch` (blockDim.x / 32 floats) and are added in warp order.
// Every thread of the block must call it. Callers alternate between two scratch buffers on
// consecutive calls: then one barrier per call suffices (a buffer is rewritten only after the
// next call's barrier, which every reader of its previous contents has passed).
__device__ __forceinline__ float row_group_sum(float v, int group, float* scratch) {
  v = lane_group_sum(v, group < kWarpSize ? group : kWarpSize);
  if (group <= kWarpSize) return v;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) scratch[warp] = v;
  __syncthreads();
  const int warps_per_group = group / kWarpSize;
  const int first = warp / warps_per_group * warps_per_group;
  float total = scratch[first];
  for (int i = 1; i < warps_per_group; ++i) total += scratch[first + i];
  return total;
}

// The largest portable thread-block cluster (sm_90): 8 CTAs.
inline constexpr int kMaxPortableCluster = 8;

// One value per CTA folded over the CTAs of a thread-block cluster (sm_90+) in rank order,
// op(...op(op(v_0, v_1), v_2)..., v_last), and returned to every thread: every CTA gets the same
// bits. `v` must be the same in every thread of the CTA. `slots` is `cluster_size` Ts of shared
// memory, alternated between two such arrays on consecutive calls (then one cluster barrier per
// call suffices: a CTA writes a peer's array only after the next call's barrier, which the peer
// passes only once it has read what the array held). The first call must follow a cluster
// barrier (cluster_barrier at the kernel's start): distributed shared memory may be written only
// once every CTA of the cluster has started. Each CTA pushes its value into slot `rank`
// of every CTA through distributed shared memory before the barrier (the barrier's release and
// acquire make the stores visible), so after it every CTA folds its own shared memory: no remote
// load waits on the critical path.
template <typename T, typename Op>
__device__ __forceinline__ T cluster_fold(const T& v, T* slots, int cluster_size, Op op) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int to = static_cast<int>(threadIdx.x);
  if (to < cluster_size) *cluster.map_shared_rank(slots + rank, to) = v;
  cluster.sync();
  T total = slots[0];
  for (int r = 1; r < cluster_size; ++r) total = op(total, slots[r]);
  return total;
#else
  (void)slots;
  (void)cluster_size;
  (void)op;
  __trap();  // the host launches clusters only on code built for sm_90 or newer
  return v;
#endif
}

// Waits until every CTA of the cluster gets here: a CTA must not exit while peers may still
// access its shared memory.
__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#endif
}

}  // namespace tigon::cuda
