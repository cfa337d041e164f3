// The kl_div / jsd / tvd kernels: prepare (the reduction's denominator and the gradient's scale),
// the row kernel (per-element loss and gradient, segment sums), finish (the reduced loss).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/divergence/plan.h"
#include "cuda/divergence/row_params.h"
#include "math/divergence.h"
#include "math/float_types.h"

namespace tigon::cuda::divergence {

inline constexpr int kReduceThreads = 1024;
inline constexpr int kScaleFloat = 2;  // header: the denominator (a double) at 0, the scale at 2

// header = {denominator, scale} for the rows counted: the denominator is d0 + (d1 - d0) * count
// (divergence_denominator is affine in the count; the host passes its values at 0 and 1).
// static: this header is in several translation units (one definition each, internal linkage).
static __global__ void __launch_bounds__(kReduceThreads)
    divergence_prepare_kernel(const std::int64_t* labels, std::int64_t rows,
                              std::int64_t ignore_index, double d0, double d1, float* header) {
  __shared__ long long counts[kReduceThreads];
  long long count = 0;
  if (labels == nullptr) {
    count = threadIdx.x == 0 ? rows : 0;
  } else {
    for (std::int64_t i = threadIdx.x; i < rows; i += kReduceThreads)
      count += labels[i] != ignore_index ? 1 : 0;
  }
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int width = kReduceThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) counts[threadIdx.x] += counts[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double denominator = d0 + (d1 - d0) * static_cast<double>(counts[0]);
    *reinterpret_cast<double*>(header) = denominator;
    header[kScaleFloat] = math::divergence_scale(denominator);
  }
}

// loss[0] = the float64 sum of the rows' float32 sums (each its segment sums in order) over the
// denominator. Thread i takes rows i, i + kReduceThreads, ...; then a fixed tree.
// static: this header is in several translation units (one definition each, internal linkage).
static __global__ void __launch_bounds__(kReduceThreads)
    divergence_finish_kernel(const float* header, const float* segment_sums, std::int64_t rows,
                             std::int64_t segments, float* loss) {
  __shared__ double totals[kReduceThreads];
  double total = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += kReduceThreads) {
    const float* s = segment_sums + r * segments;
    float row = s[0];
    for (std::int64_t k = 1; k < segments; ++k) row += s[k];
    total += row;
  }
  totals[threadIdx.x] = total;
  __syncthreads();
  for (int width = kReduceThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) totals[threadIdx.x] += totals[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = math::divergence_reduced(totals[0], *reinterpret_cast<const double*>(header));
  }
}

// One element: its loss (returned, for the sums), its kNone loss and its gradient (through the
// references).
template <math::DivergenceKind K, typename T, typename E, bool kBackward>
struct ElementStep {
  math::DivergenceOptions options;
  float scale;                // s (forward) or s * u (backward with a reduction)
  bool per_element_upstream;  // kNone backward: the gradient is d/dx times `upstream`

  __device__ __forceinline__ float operator()(float x, float t, float upstream, T& grad,
                                              E& loss) const {
    const math::DivergenceTerm e = math::divergence_term<K>(x, t, options);
    if constexpr (kBackward) {
      grad = math::from_float<T>(e.grad * (per_element_upstream ? upstream : scale));
      return 0.0f;
    } else {
      loss = math::from_float<E>(e.loss);
      grad = math::from_float<T>(e.grad * scale);
      return e.loss;
    }
  }
};

template <typename T>
__device__ __forceinline__ T* row_at(void* base, std::int64_t stride, std::int64_t row) {
  return base == nullptr ? nullptr : static_cast<T*>(base) + row * stride;
}
template <typename T>
__device__ __forceinline__ const T* row_at(const void* base, std::int64_t stride,
                                           std::int64_t row) {
  return base == nullptr ? nullptr : static_cast<const T*>(base) + row * stride;
}

// The elements [start, end) of a row one at a time, in order; returns their loss sum added to acc.
// x null: the input is not needed (kl_div's gradient).
template <math::DivergenceKind K, typename T, typename E, bool kBackward>
__device__ __forceinline__ float scalar_elements(const ElementStep<K, T, E, kBackward>& step,
                                                 const T* x, const T* t, const E* u, T* g, E* l,
                                                 std::int64_t start, std::int64_t end, float acc) {
  for (std::int64_t j = start; j < end; ++j) {
    T grad{};
    E loss{};
    const float up = u != nullptr ? math::to_float(u[j]) : 0.0f;
    const float xj = x != nullptr ? math::to_float(x[j]) : 0.0f;
    acc += step(xj, math::to_float(t[j]), up, grad, loss);
    if (g != nullptr) g[j] = grad;
    if (l != nullptr) l[j] = loss;
  }
  return acc;
}

template <typename T>
__device__ __forceinline__ void zero_elements(T* row, std::int64_t start, std::int64_t end) {
  if (row == nullptr) return;
  for (std::int64_t j = start; j < end; ++j) row[j] = math::from_float<T>(0.0f);
}

// Rows x segments tiles over a grid of any size (plan.h). kBackward: the gradient only, for the
// upstream (one element times the scale, or per element for kNone). Forward: the kNone loss or
// the segment sums, and the gradient for upstream 1 where p.grad is set (which may be the input:
// each thread reads its elements before it writes them).
template <math::DivergenceKind K, typename T, typename E, bool kBackward, Access kAccess>
__global__ void __launch_bounds__(kThreads) divergence_rows_kernel(RowParams p) {
  __shared__ float scratch[2][kThreads / kWarpSize];
  float scale = p.header[kScaleFloat];
  if (kBackward && p.upstream != nullptr) scale = scale * *p.upstream;
  const ElementStep<K, T, E, kBackward> step{p.options, scale, p.upstream_rows != nullptr};
  // kl_div's gradient (-t or -exp(t)) needs only the target: its backward leaves the input unread.
  constexpr bool kReadsInput = !(kBackward && K == math::DivergenceKind::kKlDiv);
  const std::int64_t tiles = p.rows * p.segments;
  int parity = 0;
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t row = tile / p.segments;
    const std::int64_t first = (tile - row * p.segments) * kSegment;
    const T* x = kReadsInput ? row_at<T>(p.input, p.input_row_stride, row) : nullptr;
    const T* t = row_at<T>(p.target, p.target_row_stride, row);
    T* g = row_at<T>(p.grad, p.grad_row_stride, row);
    E* l = row_at<E>(p.loss_rows, p.loss_row_stride, row);
    const E* u = row_at<E>(p.upstream_rows, p.upstream_row_stride, row);
    float acc = 0.0f;
    if (p.labels != nullptr && p.labels[row] == p.ignore_index) {
      for (int k = 0; k < kGroupsPerLane; ++k) {
        const std::int64_t start = first + (std::int64_t{k} * kThreads + threadIdx.x) * kGroup;
        const std::int64_t end = start + kGroup < p.vocab ? start + kGroup : p.vocab;
        zero_elements(g, start, end);
        zero_elements(l, start, end);
      }
    } else if constexpr (kAccess == Access::kVector) {
      // All loads of the tile first: 2 x kGroupsPerLane 16-byte (or wider) loads in flight.
      Pack<T, kGroup> xs[kGroupsPerLane], ts[kGroupsPerLane];
      Pack<E, kGroup> us[kGroupsPerLane];
#pragma unroll
      for (int k = 0; k < kGroupsPerLane; ++k) {
        const std::int64_t start = first + (std::int64_t{k} * kThreads + threadIdx.x) * kGroup;
        if (start + kGroup <= p.vocab) {
          if constexpr (kReadsInput) xs[k] = load_pack<T, kGroup>(x + start);
          ts[k] = load_pack<T, kGroup>(t + start);
          if (kBackward && u != nullptr) us[k] = load_pack<E, kGroup>(u + start);
        }
      }
#pragma unroll
      for (int k = 0; k < kGroupsPerLane; ++k) {
        const std::int64_t start = first + (std::int64_t{k} * kThreads + threadIdx.x) * kGroup;
        if (start + kGroup <= p.vocab) {
          T grads[kGroup];
          E losses[kGroup];
#pragma unroll
          for (int i = 0; i < kGroup; ++i) {
            const float up = kBackward && u != nullptr ? us[k].value(i) : 0.0f;
            const float xi = kReadsInput ? xs[k].value(i) : 0.0f;
            acc += step(xi, ts[k].value(i), up, grads[i], losses[i]);
          }
          if (g != nullptr) store_pack_global<T, kGroup>(g + start, grads);
          if (!kBackward && l != nullptr) store_pack_global<E, kGroup>(l + start, losses);
        } else if (start < p.vocab) {
          acc = scalar_elements(step, x, t, u, g, l, start, p.vocab, acc);
        }
      }
    } else {
      for (int k = 0; k < kGroupsPerLane; ++k) {
        const std::int64_t start = first + (std::int64_t{k} * kThreads + threadIdx.x) * kGroup;
        const std::int64_t end = start + kGroup < p.vocab ? start + kGroup : p.vocab;
        acc = scalar_elements(step, x, t, u, g, l, start, end, acc);
      }
    }
    if (!kBackward && p.segment_sums != nullptr) {
      const float sum = row_group_sum(acc, kThreads, scratch[parity]);
      parity ^= 1;
      if (threadIdx.x == 0) p.segment_sums[tile] = sum;
    }
  }
}

}  // namespace tigon::cuda::divergence
