// The sum over a row's threads that each RMSNorm row kernel takes once a row (the forward's sum of
// squares, the backward's dot of dy and x): over the row's group of threads in the block, then,
// for a row split over a cluster, over the cluster's CTAs in rank order.
#pragma once

#include "cuda/common/cluster_exchange.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {

// A kernel's shared memory for RowSum.
struct RowSumShared {
  float warp_sums[2][kMaxRowThreads / kWarpSize];
  ClusterExchangeBuffer<float> exchange[2];
};

// Over a cluster the CTAs' sums meet through the mbarrier exchange (cluster_exchange.cuh: each CTA
// pushes its sum into every CTA with st.async, each waits for its own to land) rather than a
// cluster barrier, which compiles to a GPU-scope fence and an L1 invalidation once a row (on an
// H100 the exchange took the backward from 51 to 58% of the copy ceiling at 8192 x 24576 and 76 to
// 83% at 4096 x 32768, 2026-12-05). Alternates its buffers between consecutive rows; the block
// barrier of row_group_sum (or a one-warp block) separates consecutive calls.
class RowSum {
 public:
  // Every thread of the block (and cluster) must construct it. Over a cluster it starts with a
  // cluster barrier (in the exchange's constructor): no CTA writes to a peer's shared memory
  // before every CTA of the cluster has started.
  __device__ RowSum(RowSumShared& shared, const RowSplit& split)
      : shared_(shared), slices_(split.slices), cluster_(shared.exchange, split.slices > 1) {}

  // The sum of v over the `group` threads of this thread's row slot (and with a cluster over
  // its CTAs, in rank order), returned to all of them. Every thread of the block (and cluster)
  // must call it, in the same order.
  __device__ __forceinline__ float operator()(float v, int group) {
    v = row_group_sum(v, group, shared_.warp_sums[parity_]);
    if (slices_ > 1) v = cluster_.fold(v, slices_, [](float a, float b) { return a + b; });
    parity_ ^= 1;
    return v;
  }

 private:
  RowSumShared& shared_;
  int slices_;
  int parity_ = 0;
  ClusterExchange<float> cluster_;
};

}  // namespace tigon::cuda::rms_norm
