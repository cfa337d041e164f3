// The sum over a row's threads that each RMSNorm row kernel takes once a row (the forward's sum of
// squares, the backward's dot of dy and x): over the row's group of threads in the block, then,
// for a row split over a cluster, over the cluster's CTAs.
#pragma once

#include "cuda/common/cluster_exchange.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {

// A kernel's shared memory for RowSum.
struct RowSumShared {
  float warp_sums[2][kMaxRowThreads / kWarpSize];
  float slice_sums[2][kMaxPortableCluster];
  ClusterExchangeBuffer exchange[2];
};

static_assert(kMaxClusterSize <= kMaxPortableCluster, "cluster_sum has a slot per CTA");
static_assert(kMaxRowThreads <= kMaxExchangeWarps * kWarpSize, "the exchange has a slot per warp");

// Rows over a cluster are summed through the cluster barrier (row_group_sum, then cluster_sum), or
// with `exchange` (Tuning::cluster_exchange) through the mbarrier exchange of
// cluster_exchange.cuh, which adds the same terms in another fixed order. Alternates its buffers
// between consecutive rows (reduce.cuh says why two suffice).
class RowSum {
 public:
  // Every thread of the block (and cluster) must construct it.
  __device__ RowSum(RowSumShared& shared, const RowSplit& split, bool exchange)
      : shared_(shared),
        slices_(split.slices),
        exchange_(exchange && split.slices > 1),
        cluster_(shared.exchange, exchange_) {}

  // The sum of v over the `group` threads of this thread's row slot (and with a cluster over
  // its CTAs), returned to all of them. Every thread of the block (and cluster) must call it, in
  // the same order.
  __device__ __forceinline__ float operator()(float v, int group) {
    if (exchange_) return cluster_(v, slices_);  // one row a block: group is the block
    v = row_group_sum(v, group, shared_.warp_sums[parity_]);
    if (slices_ > 1) v = cluster_sum(v, shared_.slice_sums[parity_], slices_);
    parity_ ^= 1;
    return v;
  }

 private:
  RowSumShared& shared_;
  int slices_;
  bool exchange_;
  int parity_ = 0;
  ClusterWarpSum cluster_;
};

}  // namespace tigon::cuda::rms_norm
