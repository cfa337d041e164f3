// The weight's pack for P elements, shared by the forward and backward kernels.
#pragma once

#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {

// The weight pack at `weight` (a pack of zeros, never read, without a weight).
template <typename Math, int P>
__device__ __forceinline__ Pack<typename MathTraits<Math>::W, P> weight_pack(
    const typename MathTraits<Math>::W* weight) {
  using T = MathTraits<Math>;
  if constexpr (T::kAffine) {
    return load_pack<typename T::W, P, Load::kReadOnly>(weight);
  } else {
    return {};
  }
}

}  // namespace tigon::cuda::rms_norm
