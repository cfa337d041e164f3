// The weight and bias packs as the LayerNorm kernels read them: absent parameters are packs never
// read, and their values are math::LayerNorm's 1 and 0.
#pragma once

#include <cstdint>

#include "cuda/common/vector_access.cuh"

namespace tigon::cuda::layer_norm {

// The pack of a parameter at `base + offset` elements (read-only path), or an unread pack when
// the parameter is absent (base null).
template <typename T, int P>
__device__ __forceinline__ Pack<T, P> param_pack(const void* base, std::int64_t offset) {
  if (base == nullptr) return {};
  return load_pack<T, P, Load::kReadOnly>(static_cast<const T*>(base) + offset);
}

// Element i of a parameter pack as float32, or `absent` (math::LayerNorm::weight/bias: 1, 0).
template <typename T, int P>
__device__ __forceinline__ float param_value(const Pack<T, P>& pack, int i, bool present,
                                             float absent) {
  return present ? pack.value(i) : absent;
}

}  // namespace tigon::cuda::layer_norm
