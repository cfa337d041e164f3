// Global -> shared copies that do not pass through registers (cp.async, sm_80+): a thread can have
// the next row in flight while it computes on the current one, without holding it in registers.
#pragma once

#include <cstdint>

namespace tigon::cuda {

// Copies 16 bytes (both addresses 16-byte aligned). Completes at a later async_wait.
__device__ __forceinline__ void async_copy_16(void* shared, const void* global) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global)
               : "memory");
#else
  *static_cast<uint4*>(shared) = *static_cast<const uint4*>(global);
#endif
}

// Copies kBytes = 4, 8 or 16 bytes (both addresses aligned to kBytes). 16 bytes bypass L1 (.cg);
// smaller copies can only go through it (.ca).
template <int kBytes>
__device__ __forceinline__ void async_copy(void* shared, const void* global) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 16) {
    async_copy_16(shared, global);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(address), "l"(global),
                 "n"(kBytes)
                 : "memory");
#else
    if constexpr (kBytes == 8) {
      *static_cast<uint2*>(shared) = *static_cast<const uint2*>(global);
    } else {
      *static_cast<unsigned*>(shared) = *static_cast<const unsigned*>(global);
    }
#endif
  }
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending committed groups are still in flight; the calling thread then sees
// the data of all the others (its own copies: other threads' need a barrier as well).
template <int kPending>
__device__ __forceinline__ void async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// async_wait with a run-time count: a binary search over the immediates of cp.async.wait_group
// (five branches). Counts above kHi wait for kHi, which is stricter, never weaker.
template <int kLo = 0, int kHi = 31>
__device__ __forceinline__ void async_wait_at_most(int pending) {
  if constexpr (kLo == kHi) {
    async_wait<kLo>();
  } else {
    constexpr int kMid = (kLo + kHi) / 2;
    if (pending <= kMid) {
      async_wait_at_most<kLo, kMid>(pending);
    } else {
      async_wait_at_most<kMid + 1, kHi>(pending);
    }
  }
}

}  // namespace tigon::cuda
