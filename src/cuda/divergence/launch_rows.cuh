// launch_rows<K> (launch.h), instantiated once per kind in divergence_<kind>.cu so that the kinds
// compile in parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/occupancy.h"
#include "cuda/divergence/kernels.cuh"
#include "cuda/divergence/launch.h"

namespace tigon::cuda::divergence {

inline RowParams row_params(const detail::DivergenceArgs& a, bool backward) {
  RowParams p{};
  p.input = a.input;
  p.input_row_stride = a.input_row_stride;
  p.target = a.target;
  p.target_row_stride = a.target_row_stride;
  p.labels = a.labels;
  p.ignore_index = a.ignore_index;
  p.rows = a.rows;
  p.vocab = a.vocab;
  p.segments = segments_per_row(a.vocab);
  p.options = a.options;
  p.header = a.workspace;
  p.grad = a.grad;
  p.grad_row_stride = a.grad_row_stride;
  const bool none = a.reduction == Reduction::kNone;
  if (backward) {
    if (none) {
      p.upstream_rows = a.grad_loss;
      p.upstream_row_stride = a.grad_loss_row_stride;
    } else {
      p.upstream = static_cast<const float*>(a.grad_loss);
    }
  } else if (none) {
    p.loss_rows = a.loss;
    p.loss_row_stride = a.loss_row_stride;
  } else {
    p.segment_sums = a.workspace + kHeaderFloats;
  }
  return p;
}

template <math::DivergenceKind K, typename T, typename E, bool kBackward, Access kAccess>
void launch_rows_as(const RowParams& p, const Plan& plan, int device, cudaStream_t s) {
  const auto kernel = divergence_rows_kernel<K, T, E, kBackward, kAccess>;
  const std::int64_t tiles = p.rows * p.segments;
  std::int64_t grid = plan.max_ctas;
  if (grid <= 0) {
    grid = std::max<std::int64_t>(
        1, resident_clusters(reinterpret_cast<const void*>(kernel), dim3(kThreads), 0, 1, device));
  }
  launch_kernel(kernel, std::min({tiles, grid, kMaxGridBlocks}), dim3(kThreads), 0, 1, s, p);
}

template <math::DivergenceKind K>
void launch_rows(const detail::DivergenceArgs& a, const Plan& plan, bool backward, int device,
                 cudaStream_t s) {
  if (a.rows == 0) return;
  const RowParams p = row_params(a, backward);
  const DType element = backward ? a.grad_loss_dtype : a.loss_dtype;
  const bool element_is_input_dtype = a.reduction == Reduction::kNone && element != DType::kFloat32;
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto with_element = [&](auto e_tag) {
      using E = typename decltype(e_tag)::type;
      const auto with_direction = [&](auto backward_tag) {
        constexpr bool kBackward = decltype(backward_tag)::value;
        if (plan.access == Access::kVector) {
          launch_rows_as<K, T, E, kBackward, Access::kVector>(p, plan, device, s);
        } else {
          launch_rows_as<K, T, E, kBackward, Access::kScalar>(p, plan, device, s);
        }
      };
      if (backward) {
        with_direction(std::true_type{});
      } else {
        with_direction(std::false_type{});
      }
    };
    if constexpr (std::is_same_v<T, float>) {
      with_element(detail::TypeTag<float>{});
    } else if (element_is_input_dtype) {
      with_element(detail::TypeTag<T>{});
    } else {
      with_element(detail::TypeTag<float>{});
    }
  });
}

}  // namespace tigon::cuda::divergence
