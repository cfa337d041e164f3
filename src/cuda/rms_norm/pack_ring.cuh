// The staged RMSNorm kernels' shared-memory ring: `stages` slots, each holding every thread's K
// packs of one row block, filled with cp.async while the thread computes on an earlier slot. Thread
// t's pack k of slot s sits at element ((s * K + k) * blockDim.x + t) * P, so a warp's copies and
// reads of one k are contiguous (no bank conflicts), and every thread reads back only the packs it
// copied itself: no barrier guards a slot, and a slot is refilled as soon as its thread is done
// with it.
#pragma once

#include <cstddef>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/vector_access.cuh"

namespace tigon::cuda::rms_norm {

template <typename T, int P, int K>
struct PackRing {
  static constexpr int kPackBytes = static_cast<int>(sizeof(T)) * P;
  static_assert(kPackBytes == 4 || kPackBytes == 8 || kPackBytes == 16, "cp.async sizes");

  T* base;

  static constexpr std::size_t bytes(int stages, int threads) {
    return static_cast<std::size_t>(stages) * K * threads * kPackBytes;
  }

  __device__ __forceinline__ T* at(int stage, int k) const {
    return base + static_cast<std::ptrdiff_t>((stage * K + k) * static_cast<int>(blockDim.x) +
                                              static_cast<int>(threadIdx.x)) *
                      P;
  }

  // Starts copying the thread's packs src[k * stride], k < count, into slot `stage`.
  __device__ __forceinline__ void fill(int stage, const T* src, int count, int stride) const {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (k < count) async_copy<kPackBytes>(at(stage, k), src + k * stride);
    }
  }

  __device__ __forceinline__ Pack<T, P> read(int stage, int k) const {
    return load_pack<T, P>(at(stage, k));
  }
};

}  // namespace tigon::cuda::rms_norm
