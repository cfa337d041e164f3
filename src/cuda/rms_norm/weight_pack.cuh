// The weight's packs as the forward and backward kernels read them.
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

// A thread's K weight packs of a row slice (packs k * stride apart from `weight`): with kHeld all
// loaded at construction, before the row's reduction, so their latency hides behind it and one
// load serves every use; otherwise each read loads its pack (fewer registers).
template <typename Math, int P, int K, bool kHeld>
class RowWeights {
  using W = typename MathTraits<Math>::W;

 public:
  __device__ __forceinline__ RowWeights(const W* weight, int stride, int packs)
      : weight_(weight), stride_(stride) {
    if constexpr (kHeld) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (k < packs) held_[k] = weight_pack<Math, P>(weight + k * stride);
      }
    }
  }
  __device__ __forceinline__ Pack<W, P> operator[](int k) const {
    if constexpr (kHeld) {
      return held_[k];
    } else {
      return weight_pack<Math, P>(weight_ + k * stride_);
    }
  }

 private:
  const W* weight_;
  int stride_;
  Pack<W, P> held_[kHeld ? K : 1];
};

}  // namespace tigon::cuda::rms_norm
