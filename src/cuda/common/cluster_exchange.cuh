// A sum over the warps of a thread-block cluster (sm_90) without a cluster barrier a call.
//
// Why: cluster_fold's barrier (barrier.cluster.arrive.release, what cooperative_groups'
// cluster.sync() compiles to) is a GPU-scope fence, MEMBAR.ALL.GPU in the SASS: every thread waits
// there until its earlier global stores are acknowledged (the previous row's outputs), and the
// wait that follows invalidates L1 (CCTL.IVALL). Here each warp instead pushes its sum into every
// CTA of the cluster with st.async, whose completion counts down the receiving CTA's mbarrier by
// the bytes it wrote; a CTA waits on its own mbarrier for all of the cluster's sums to land. No
// fence, no rendezvous: a CTA waits only for the data it needs.
#pragma once

#include <cstdint>

#include "cuda/common/reduce.cuh"

namespace tigon::cuda {

// Warps a CTA of the exchange may have (512 threads).
inline constexpr int kMaxExchangeWarps = 16;

// Shared memory of one exchange buffer: every CTA's warp sums, and the mbarrier counting them in.
struct ClusterExchangeBuffer {
  float sums[kMaxPortableCluster * kMaxExchangeWarps];  // [rank][warp], warps a CTA apart
  alignas(8) std::uint64_t landed;
};

// Alternates between two buffers on consecutive calls. Two suffice: a CTA can push call n + 2's
// sums into a peer only after its own call n + 1 completed, which needed the peer's call n + 1
// sums, which each of the peer's warps pushes after it has read call n's buffer; and for the same
// reason a peer's call n + 2 bytes cannot land in this CTA's mbarrier phase of call n.
class ClusterWarpSum {
 public:
  // With `active`, every thread of every CTA of the cluster must construct it, before any call:
  // thread 0 sets up the mbarriers, and a cluster barrier makes them visible before any peer
  // writes to them. Inactive, it does nothing and must not be called.
  __device__ ClusterWarpSum(ClusterExchangeBuffer (&buffers)[2], bool active) : buffers_(buffers) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (!active) return;
    if (threadIdx.x == 0) {
      for (ClusterExchangeBuffer& b : buffers) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&b.landed))
                     : "memory");
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_barrier();
#else
    (void)active;
#endif
  }

  // The sum of `v` over every thread of every CTA of the cluster (`ctas` of them, blockDim.x the
  // same in each), returned to all: each warp's total (xor butterfly), then the ctas x warps totals
  // added in a fixed order (each lane takes every 32nd one, then a butterfly), so every thread
  // of the cluster gets the same bits, a function of the cluster's shape alone. Every thread of the
  // cluster must call it, the same number of times.
  __device__ float operator()(float v, int ctas) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    ClusterExchangeBuffer& b = buffers_[parity_];
    const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
    const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
    const int warps = static_cast<int>(blockDim.x) / kWarpSize;
    int rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    v = lane_group_sum(v, kWarpSize);
    const unsigned landed = shared_address(&b.landed);
    if (threadIdx.x == 0) {
      // This phase completes once this arrival is in and ctas * warps floats have landed (bytes
      // that land first count the phase's transaction count below zero until then).
      const unsigned bytes = static_cast<unsigned>(ctas * warps) * sizeof(float);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(landed),
                   "r"(bytes)
                   : "memory");
    }
    if (lane < ctas) {  // lane c pushes this warp's total to CTA c
      const unsigned slot = shared_address(&b.sums[rank * warps + warp]);
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
              peer_address(slot, lane)),
          "r"(__float_as_uint(v)), "r"(peer_address(landed, lane))
          : "memory");
    }
    const unsigned phase = (phases_ >> parity_) & 1u;
    unsigned done = 0;
    do {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(landed), "r"(phase)
          : "memory");
    } while (done == 0);
    phases_ ^= 1u << parity_;
    parity_ ^= 1;
    float total = 0.0f;
    for (int e = lane; e < ctas * warps; e += kWarpSize) total += b.sums[e];
    return lane_group_sum(total, kWarpSize);
#else
    (void)ctas;
    __trap();  // the host launches clusters only on code built for sm_90 or newer
    return v;
#endif
  }

 private:
  __device__ static unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The address of the same shared variable in CTA `rank` of the cluster.
  __device__ static unsigned peer_address(unsigned local, int rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
  }
#endif

  ClusterExchangeBuffer (&buffers_)[2];
  int parity_ = 0;
  unsigned phases_ = 0;  // bit k: the parity of buffer k's current mbarrier phase
};

}  // namespace tigon::cuda
