// L2 eviction priorities (sm_80+ cache-hint policies) for kernels that read data twice: mark what
// will be read again "evict last" and what will not "evict first", so that a working set close
// to the L2's size keeps the part that is reused. Hints change only where data is cached, never
// results; without sm_80 they are plain accesses.
#pragma once

#include <cstdint>

namespace tigon::cuda {

// A createpolicy.fractional cache policy of eviction priority kPriority for every line accessed.
enum class L2Priority { kEvictFirst, kEvictNormal, kEvictLast };

template <L2Priority kPriority>
__device__ __forceinline__ std::uint64_t l2_policy() {
  std::uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kPriority == L2Priority::kEvictFirst) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else if constexpr (kPriority == L2Priority::kEvictNormal) {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  }
#endif
  return policy;
}

__device__ __forceinline__ std::uint64_t l2_evict_last_policy() {
  return l2_policy<L2Priority::kEvictLast>();
}
__device__ __forceinline__ std::uint64_t l2_evict_first_policy() {
  return l2_policy<L2Priority::kEvictFirst>();
}
// The policy of an unhinted access: for kernels that choose their hints at run time.
__device__ __forceinline__ std::uint64_t l2_evict_normal_policy() {
  return l2_policy<L2Priority::kEvictNormal>();
}

// async_copy_16 (async_copy.cuh) under an L2 policy.
__device__ __forceinline__ void async_copy_16_hinted(void* shared, const void* global,
                                                     std::uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(global), "l"(policy)
               : "memory");
#else
  (void)policy;
  *static_cast<uint4*>(shared) = *static_cast<const uint4*>(global);
#endif
}

// One 16-byte global store (st.global.v4) under an L2 policy.
__device__ __forceinline__ void store_16_hinted(void* global, std::uint32_t w0, std::uint32_t w1,
                                                std::uint32_t w2, std::uint32_t w3,
                                                std::uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("st.global.L2::cache_hint.v4.b32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(global), "r"(w0),
               "r"(w1), "r"(w2), "r"(w3), "l"(policy)
               : "memory");
#else
  (void)policy;
  *static_cast<uint4*>(global) = make_uint4(w0, w1, w2, w3);
#endif
}

// Asks L2 to fetch the line holding `global` (prefetch.global.L2): nothing is returned and no
// register is held, so a kernel can start the next row's traffic before it needs the data.
__device__ __forceinline__ void prefetch_l2(const void* global) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("prefetch.global.L2 [%0];" ::"l"(global));
#else
  (void)global;
#endif
}

}  // namespace tigon::cuda
