// Shared-memory mbarriers with transaction counts (sm_90), and the bulk copy (TMA) that counts its
// bytes into one. A phase completes once its expected arrivals are in and the bytes announced
// with them (arrive_expect_tx) have landed; bytes may land before they are announced (the count
// goes below zero until then). Addresses are 32-bit shared-window addresses (shared_address).
// Device code for older GPUs traps: the host launches these paths only on sm_90 code.
#pragma once

#include <cstdint>

namespace tigon::cuda {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Set-up by one thread: `arrivals` arrivals complete each phase. After the last of a CTA's
// mbarrier_init calls, that thread calls mbarrier_init_fence, which makes the initializations
// visible to the async proxy (bulk copies, st.async) and to the cluster; the caller then needs a
// block (or cluster) barrier before any other thread or peer uses them.
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals)
               : "memory");
#else
  (void)bar;
  (void)arrivals;
  __trap();
#endif
}

__device__ __forceinline__ void mbarrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Orders this CTA's earlier shared-memory accesses by ordinary loads and stores (the generic
// proxy) before its later bulk copies into shared memory (the async proxy): a thread that refills
// a buffer others have read calls it after the barrier that says they are done.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// One arrival on the current phase, announcing `bytes` more bytes for it to wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  (void)bar;
  (void)bytes;
  __trap();
#endif
}

// Waits until the phase of parity `parity` has completed. The default .acquire.cta semantics:
// the data counted in lands in this CTA's shared memory, which L1 does not cache, so no L1
// invalidation is needed (.acquire.cluster would add one, CCTL.IVALL).
__device__ __forceinline__ void mbarrier_wait(unsigned bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  (void)bar;
  (void)parity;
  __trap();
#endif
}

// Starts copying `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory
// into this CTA's shared memory with one instruction (the TMA unit moves them: no registers, no
// per-thread copies); their arrival counts down the mbarrier `bar` of this CTA.
__device__ __forceinline__ void bulk_copy_to_shared(void* shared, const void* global,
                                                    unsigned bytes, unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_address(shared)),
      "l"(global), "r"(bytes), "r"(bar)
      : "memory");
#else
  (void)shared;
  (void)global;
  (void)bytes;
  (void)bar;
  __trap();
#endif
}

}  // namespace tigon::cuda
