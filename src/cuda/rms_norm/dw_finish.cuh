// The second backward kernel: adds the float32 dW partial rows in a fixed order and rounds the
// sum to the weight dtype.
#pragma once

#include <cstdint>

#include "cuda/common/grid_dependency.cuh"
#include "math/float_types.h"

namespace tigon::cuda::rms_norm {

// dw[j] = round_W(sum over groups of partials[g][j]), groups added in a fixed order: kFinishRows
// threads per column each add every kFinishRows-th partial row in order, then those kFinishRows
// sums are added in order. blockDim = (kFinishColumns, kFinishRows).
inline constexpr int kFinishColumns = 32;
inline constexpr int kFinishRows = 32;  // partial rows summed in parallel per column

template <typename W>
__global__ void __launch_bounds__(kFinishColumns* kFinishRows)
    rms_norm_dw_finish_kernel(const float* partials, std::int64_t groups, std::int64_t hidden,
                              W* dw) {
  wait_for_prior_grid();  // launched as the partials kernel's dependent (rms_norm.cu)
  __shared__ float sums[kFinishRows][kFinishColumns + 1];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  for (std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kFinishColumns; col0 < hidden;
       col0 += static_cast<std::int64_t>(gridDim.x) * kFinishColumns) {
    const std::int64_t col = col0 + tx;
    float sum = 0.0f;
    if (col < hidden) {
#pragma unroll 8
      for (std::int64_t g = ty; g < groups; g += kFinishRows) sum += partials[g * hidden + col];
    }
    sums[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && col < hidden) {
      float total = sums[0][tx];
      for (int i = 1; i < kFinishRows; ++i) total += sums[i][tx];
      dw[col] = math::from_float<W>(total);
    }
    __syncthreads();
  }
}

}  // namespace tigon::cuda::rms_norm
