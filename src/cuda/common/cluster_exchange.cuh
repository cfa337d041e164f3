// One value per CTA folded over a thread-block cluster (sm_90), as cluster_fold in reduce.cuh
// (same operands, same order, same bits), without a cluster barrier a call.
//
// Why: cluster_fold's barrier.cluster.arrive.release (what cooperative_groups' cluster.sync()
// compiles to) is a GPU-scope fence in the SASS, MEMBAR.ALL.GPU: every thread waits there until
// its earlier memory operations are performed (the previous row's stores, and any copies it
// already has in flight for the next row), and the wait after it invalidates L1 (CCTL.IVALL).
// Here each CTA pushes its value into every CTA of the cluster with st.async, whose completion
// counts down the receiving CTA's mbarrier by the bytes it wrote, and a CTA waits on its own
// mbarrier until the cluster's values have landed: no fence, and a CTA waits only for the data it
// needs.
#pragma once

#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/reduce.cuh"

namespace tigon::cuda {

// One exchange buffer in shared memory: the value of every CTA of the cluster (by rank), and the
// mbarrier that counts them in.
template <typename T>
struct ClusterExchangeBuffer {
  static_assert(sizeof(T) == 4 || sizeof(T) == 16, "st.async stores 4 or 16 bytes here");
  T values[kMaxPortableCluster];
  alignas(8) std::uint64_t landed;
};

// Alternates between two buffers on consecutive calls. Two suffice where the CTA passes a block
// barrier between consecutive calls (or has one warp, whose __syncwarp in fold serves): a CTA
// pushes call n + 2's value into a peer only after its own call n + 1 completed, which needed the
// peer's call n + 1 value, which the peer pushes only after that barrier, so after all its threads
// have read call n's buffer; for the same reason a peer's call n + 2 bytes cannot land in this
// CTA's mbarrier phase of call n.
template <typename T>
class ClusterExchange {
 public:
  // With `active`, every thread of every CTA of the cluster must construct it, before any call:
  // thread 0 sets up the mbarriers, and a cluster barrier makes them visible before any peer
  // writes to them. Inactive, it does nothing and must not be called.
  __device__ ClusterExchange(ClusterExchangeBuffer<T> (&buffers)[2], bool active)
      : buffers_(buffers) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (!active) return;
    if (threadIdx.x == 0) {
      for (ClusterExchangeBuffer<T>& b : buffers) mbarrier_init(&b.landed, 1);
      mbarrier_init_fence();
    }
    cluster_barrier();
#else
    (void)active;
#endif
  }

  // op(...op(op(v_0, v_1), v_2)..., v_last) over the `ctas` CTAs of the cluster in rank order,
  // returned to every thread. `v` must be the same in every thread of the CTA (threads 0 to
  // ctas - 1 push it). Every thread of the cluster must call it, the same number of times.
  template <typename Op>
  __device__ T fold(const T& v, int ctas, Op op) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // A one-warp CTA has no block barrier between calls: this orders its reads of the buffer two
    // calls back before this call's pushes (see the class comment).
    __syncwarp();
    ClusterExchangeBuffer<T>& b = buffers_[parity_];
    unsigned rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    const unsigned landed = shared_address(&b.landed);
    if (threadIdx.x == 0) {
      // The phase completes once this arrival is in and ctas values have landed (bytes that land
      // first take the phase's transaction count below zero until then).
      mbarrier_arrive_expect_tx(landed, static_cast<unsigned>(ctas * sizeof(T)));
    }
    if (static_cast<int>(threadIdx.x) < ctas) {  // thread c pushes this CTA's value to CTA c
      const int peer = static_cast<int>(threadIdx.x);
      push(peer_address(shared_address(&b.values[rank]), peer), v, peer_address(landed, peer));
    }
    // .acquire.cta (mbarrier.cuh): no L1 invalidation once a call, which this class avoids.
    mbarrier_wait(landed, (phases_ >> parity_) & 1u);
    phases_ ^= 1u << parity_;
    parity_ ^= 1;
    T total = b.values[0];
    for (int r = 1; r < ctas; ++r) total = op(total, b.values[r]);
    return total;
#else
    (void)ctas;
    (void)op;
    __trap();  // the host launches clusters only on code built for sm_90 or newer
    return v;
#endif
  }

 private:
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The address of the same shared variable in CTA `rank` of the cluster.
  __device__ static unsigned peer_address(unsigned local, int rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    return remote;
  }

  // v into the peer's shared memory at `slot`, counted in by the peer's mbarrier at `landed`.
  __device__ static void push(unsigned slot, const T& v, unsigned landed) {
    const auto* w = reinterpret_cast<const unsigned*>(&v);
    if constexpr (sizeof(T) == 4) {
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(slot),
          "r"(w[0]), "r"(landed)
          : "memory");
    } else {
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
          "[%5];" ::"r"(slot),
          "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(landed)
          : "memory");
    }
  }
#endif

  ClusterExchangeBuffer<T> (&buffers_)[2];
  int parity_ = 0;
  unsigned phases_ = 0;  // bit k: the parity of buffer k's current mbarrier phase
};

}  // namespace tigon::cuda
