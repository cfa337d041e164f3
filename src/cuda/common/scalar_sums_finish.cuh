// The finishing kernel of a scalar parameter's gradient (DyT's dalpha, PolyNorm's dweight and
// dbias): adds float32 partials (one per block or per row, written by the main backward kernel)
// in a fixed order in float64, then rounds to float32 and to the parameter's dtype, as the CPU
// backend finishes its float64 chunk totals. The order depends on the partial count only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/launch.cuh"
#include "math/float_types.h"
#include "tigon/tensor.h"

namespace tigon::cuda {

inline constexpr int kScalarSumsMax = 4;
inline constexpr int kScalarSumsThreads = 256;

// Where each of up to kScalarSumsMax sums goes: a pointer and the parameter's dtype.
struct ScalarSumsOut {
  void* ptr[kScalarSumsMax] = {};
  DType dtype[kScalarSumsMax] = {};
};

__device__ __forceinline__ void store_as(void* p, DType dtype, float v) {
  switch (dtype) {
    case DType::kFloat16: *static_cast<math::Half*>(p) = math::from_float<math::Half>(v); break;
    case DType::kBFloat16:
      *static_cast<math::BFloat16*>(p) = math::from_float<math::BFloat16>(v);
      break;
    default: *static_cast<float*>(p) = v; break;
  }
}

// partials: [count][sums] floats. Sum c = round(float(sum over i of partials[i][c])): thread t
// adds entries t, t + 256, ... in order, then thread c adds the 256 thread totals in order.
// static: this header is in several translation units (one definition each, internal linkage).
static __global__ void __launch_bounds__(kScalarSumsThreads)
    scalar_sums_finish_kernel(const float* partials, std::int64_t count, int sums,
                              ScalarSumsOut out) {
  __shared__ double totals[kScalarSumsMax][kScalarSumsThreads];
  const int t = static_cast<int>(threadIdx.x);
  for (int c = 0; c < sums; ++c) {
    double s = 0.0;
    for (std::int64_t i = t; i < count; i += kScalarSumsThreads) s += partials[i * sums + c];
    totals[c][t] = s;
  }
  __syncthreads();
  if (t < sums) {
    double s = totals[t][0];
    for (int i = 1; i < kScalarSumsThreads; ++i) s += totals[t][i];
    store_as(out.ptr[t], out.dtype[t], static_cast<float>(s));
  }
}

inline void launch_scalar_sums_finish(const float* partials, std::int64_t count, int sums,
                                      const ScalarSumsOut& out, cudaStream_t stream) {
  launch_kernel(scalar_sums_finish_kernel, 1, dim3(kScalarSumsThreads), 0, 1, stream, partials,
                count, sums, out);
}

}  // namespace tigon::cuda
