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
  float slice_sums[2][kMaxPortableCluster];
  ClusterExchangeBuffer<float> exchange[2];
};

static_assert(kMaxClusterSize <= kMaxPortableCluster, "the cluster sums have a slot per CTA");

// Over a cluster the CTAs' sums meet through the cluster barrier (cluster_sum) or, with
// `exchange` (Tuning::cluster_exchange), through the mbarrier exchange (cluster_exchange.cuh):
// the same terms in the same order, so the same bits. Alternates its buffers between consecutive
// rows; the block barrier of row_group_sum (or a one-warp block) separates consecutive calls, as
// both cluster paths need.
class RowSum {
 public:
  // Every thread of the block (and cluster) must construct it. Over a cluster it starts with a
  // cluster barrier (in the exchange's constructor, or here for cluster_sum): no CTA writes to a
  // peer's shared memory before every CTA of the cluster has started.
  __device__ RowSum(RowSumShared& shared, const RowSplit& split, bool exchange)
      : shared_(shared),
        slices_(split.slices),
        exchange_(exchange && split.slices > 1),
        cluster_(shared.exchange, exchange_) {
    if (slices_ > 1 && !exchange_) cluster_barrier();
  }

  // The sum of v over the `group` threads of this thread's row slot (and with a cluster over
  // its CTAs), returned to all of them. Every thread of the block (and cluster) must call it, in
  // the same order.
  __device__ __forceinline__ float operator()(float v, int group) {
    v = row_group_sum(v, group, shared_.warp_sums[parity_]);
    if (exchange_) {
      v = cluster_.fold(v, slices_, [](float a, float b) { return a + b; });
    } else if (slices_ > 1) {
      v = cluster_sum(v, shared_.slice_sums[parity_], slices_);
    }
    parity_ ^= 1;
    return v;
  }

 private:
  RowSumShared& shared_;
  int slices_;
  bool exchange_;
  int parity_ = 0;
  ClusterExchange<float> cluster_;
};

}  // namespace tigon::cuda::rms_norm
