// GroupNorm CUDA backend entry points: make the op's device current and launch on the caller's
// stream. Never allocates and never synchronizes (CUDA-graph safe). One launch shape: a CTA of
// kThreads per (sample, group) row, the grid capped at a few waves (kernels loop over rows).
#include <cuda_runtime.h>

#include <algorithm>

#include "core/dispatch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/group_norm/kernels.cuh"
#include "ops/group_norm_args.h"

namespace tigon::cuda {
namespace {

// Rows are independent and each CTA loops over its rows, so the grid only sets how many are in
// flight: 16 CTAs per SM covers full occupancy (2048 threads) twice over.
std::int64_t grid_for(std::int64_t rows, int device) {
  const std::int64_t resident = static_cast<std::int64_t>(device_properties(device).sm_count) * 16;
  return std::max<std::int64_t>(1, std::min(rows, resident));
}

}  // namespace

void group_norm_fwd(const detail::GroupNormFwdArgs& a, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  detail::dispatch_norm_types(
      a.x_dtype, a.weight_dtype, a.bias_dtype, [&]<typename X, typename W, typename B>() {
        launch_kernel(group_norm::forward_kernel<X, W, B>, grid_for(a.shape.rows(), device),
                      dim3(group_norm::kThreads), 0, 1, s, a);
      });
}

void group_norm_bwd(const detail::GroupNormBwdArgs& a, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  const auto& shape = a.shape;
  if (shape.samples == 0) {
    if (a.dw) {
      TIGON_CUDA_CHECK(cudaMemsetAsync(a.dw, 0, element_size(a.weight_dtype) * shape.channels, s));
    }
    if (a.db) {
      TIGON_CUDA_CHECK(cudaMemsetAsync(a.db, 0, element_size(a.db_dtype) * shape.channels, s));
    }
    return;
  }
  detail::dispatch_norm_types(
      a.x_dtype, a.weight_dtype, a.db_dtype, [&]<typename X, typename W, typename DB>() {
        launch_kernel(group_norm::backward_kernel<X, W>, grid_for(shape.rows(), device),
                      dim3(group_norm::kThreads), 0, 1, s, a);
        if (a.dw == nullptr && a.db == nullptr) return;
        constexpr int kSumThreads = 256;
        const auto* sums = static_cast<const float*>(a.workspace);
        launch_kernel(group_norm::channel_sums_kernel<W, DB>,
                      (shape.channels + kSumThreads - 1) / kSumThreads, dim3(kSumThreads), 0, 1, s,
                      sums, sums + shape.samples * shape.channels, shape.samples, shape.channels,
                      static_cast<W*>(a.dw), static_cast<DB*>(a.db));
      });
}

}  // namespace tigon::cuda
