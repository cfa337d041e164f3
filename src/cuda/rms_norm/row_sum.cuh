// The sum over a row's threads that each RMSNorm row kernel takes once a row (the forward's sum of
// squares, the backward's dot of dy and x): over the row's group of threads in the block, then,
// for a row split into slices, over the slices' CTAs in rank order (a cluster's, or SlicePass's
// two launches without one: the same bits).
#pragma once

#include "cuda/common/cluster_exchange.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "cuda/rms_norm/thread_share.cuh"

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
// kSliced: the kernel may see rows split into slices (the light forward never does, and its short
// rows would pay for the slice state: 5% at bf16 4096 x 4096 on an H100).
template <bool kSliced>
class RowSum;

template <>
class RowSum<false> {
 public:
  __device__ RowSum(RowSumShared& shared, const RowSplit&, const SliceSums&, const ThreadShare&)
      : shared_(shared) {}

  __device__ __forceinline__ float operator()(float v, int group, std::int64_t /*row*/) {
    v = row_group_sum(v, group, shared_.warp_sums[parity_]);
    parity_ ^= 1;
    return v;
  }

 private:
  RowSumShared& shared_;
  int parity_ = 0;
};

template <>
class RowSum<true> {
 public:
  // Every thread of the block (and cluster) must construct it. Over a cluster it starts with a
  // cluster barrier (in the exchange's constructor): no CTA writes to a peer's shared memory
  // before every CTA of the cluster has started. `t`: this thread's share (its slice and lane).
  __device__ RowSum(RowSumShared& shared, const RowSplit& split, const SliceSums& slice_sums,
                    const ThreadShare& t)
      : shared_(shared),
        slices_(split.slices),
        slice_(t.slice),
        publisher_(t.lane == 0),
        sums_(slice_sums),
        cluster_(shared.exchange, split.slices > 1 && slice_sums.pass == SlicePass::kCluster) {}

  // The sum of v over the `group` threads of this thread's row slot and, for a row split into
  // slices, over the slices in rank order (through the cluster, or the slice sums in global
  // memory: SlicePass), returned to all of them. `row`: the row of this slot, -1 past the last.
  // Every thread of the block (and cluster) must call it, in the same order.
  __device__ __forceinline__ float operator()(float v, int group, std::int64_t row) {
    v = row_group_sum(v, group, shared_.warp_sums[parity_]);
    parity_ ^= 1;
    if (slices_ == 1) return v;
    switch (sums_.pass) {
      case SlicePass::kCluster:
        return cluster_.fold(v, slices_, [](float a, float b) { return a + b; });
      case SlicePass::kPublish:
        if (publisher_ && row >= 0) sums_.sums[row * slices_ + slice_] = v;
        return v;
      case SlicePass::kGather:
        if (row < 0) return v;
        {
          // What the cluster's fold adds: slice 0's sum, then the others in rank order.
          const float* sums = sums_.sums + row * slices_;
          float total = sums[0];
          for (int s = 1; s < slices_; ++s) total += sums[s];
          return total;
        }
    }
    return v;
  }

 private:
  RowSumShared& shared_;
  int slices_;
  int slice_;
  bool publisher_;
  SliceSums sums_;
  int parity_ = 0;
  ClusterExchange<float> cluster_;
};

}  // namespace tigon::cuda::rms_norm
