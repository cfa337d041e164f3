// The second backward kernel: adds the float32 dW partial rows in a fixed order and rounds the
// sum to the weight dtype.
#pragma once

#include <cstdint>

#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/vector_access.cuh"
#include "math/float_types.h"

namespace tigon::cuda::rms_norm {

// dw[j] = round_W(sum over groups of partials[g][j]), groups added in a fixed order: with
// blockDim = (columns / kLanes, rows), `rows` threads per column each add every rows-th partial row
// in order, then those `rows` sums are added in order (adding them pairwise instead, 7 steps rather
// than 127 dependent adds at 8 columns, was no faster on an H100, 2026-12-05). columns * rows =
// kFinishThreads; the column tile (finish_columns in layout.cuh: 8 for rows up to 2048 elements,
// else 32) is a function of the row length alone, so dW's bits stay
// a function of the shape. Each thread adds kLanes adjacent columns: 1, or 4 with one 16-byte load
// a partial row (finish_vector in layout.cuh; partials 16-byte aligned, hidden a multiple of 4),
// which adds the same terms in the same order, so gives the same bits with a quarter of the
// threads.
inline constexpr int kFinishThreads = 1024;

template <typename W, int kLanes>
__global__ void __launch_bounds__(kFinishThreads / kLanes)
    rms_norm_dw_finish_kernel(const float* partials, std::int64_t groups, std::int64_t hidden,
                              W* dw) {
  wait_for_prior_grid();  // launched as the partials kernel's dependent (rms_norm.cu)
  // [rows][columns], one float a column and row: a warp's 32 threads touch consecutive floats.
  __shared__ float sums[kFinishThreads];
  const int columns = static_cast<int>(blockDim.x) * kLanes;
  const int rows = static_cast<int>(blockDim.y);
  // This thread's first column in the tile.
  const int first = static_cast<int>(threadIdx.x) * kLanes;
  const int ty = static_cast<int>(threadIdx.y);
  for (std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * columns; col0 < hidden;
       col0 += static_cast<std::int64_t>(gridDim.x) * columns) {
    const std::int64_t col = col0 + first;
    float sum[kLanes];
#pragma unroll
    for (int i = 0; i < kLanes; ++i) sum[i] = 0.0f;
    if (col < hidden) {
#pragma unroll 8
      for (std::int64_t g = ty; g < groups; g += rows) {
        const Pack<float, kLanes> v = load_pack<float, kLanes>(partials + g * hidden + col);
#pragma unroll
        for (int i = 0; i < kLanes; ++i) sum[i] += v.value(i);
      }
    }
#pragma unroll
    for (int i = 0; i < kLanes; ++i) sums[ty * columns + first + i] = sum[i];
    __syncthreads();
    if (ty == 0 && col < hidden) {
#pragma unroll
      for (int i = 0; i < kLanes; ++i) {
        float total = sums[first + i];
        for (int r = 1; r < rows; ++r) total += sums[r * columns + first + i];
        dw[col + i] = math::from_float<W>(total);
      }
    }
    __syncthreads();
  }
}

}  // namespace tigon::cuda::rms_norm
