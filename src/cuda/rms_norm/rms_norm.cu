// RMSNorm CUDA backend entry points: make the op's device current, pick the casting mode's kernels
// (rms_norm_<mode>.cu), finish dW, all on the caller's stream. Never allocates and never
// synchronizes, so the calls can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/dispatch.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_properties.h"
#include "cuda/common/launch.cuh"
#include "cuda/rms_norm/dw_finish_launch.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "cuda/rms_norm/modes.h"
#include "ops/rms_norm_args.h"

namespace tigon::cuda {
namespace {

using namespace tigon::cuda::rms_norm;

// The device facts the launch configs read (cached per device: device_properties.h).
DeviceTraits device_traits(int device) {
  const DeviceProperties& d = device_properties(device);
  return {d.clusters, d.peak_memory_gbps >= kFastMemoryGbps};
}

void finish_dw(const detail::RmsNormBwdArgs& a, int device, cudaStream_t stream) {
  finish_dw_partials(static_cast<const float*>(a.workspace),
                     dw_groups(a.rows, a.hidden, static_cast<int>(element_size(a.x_dtype))).groups,
                     a.hidden, a.weight_dtype, a.dw, device, stream);
}

}  // namespace

// The slice sums (SlicePass) a launch on `d` may need: the larger of the 16-byte and the scalar
// path's (which one runs depends on the pointers, which the size queries do not see).
template <typename Config>
std::int64_t slice_sum_floats_of(std::int64_t rows, std::int64_t hidden, int x_size,
                                 Config config_for_pack) {
  std::int64_t floats = 0;
  for (const int pack : {16 / x_size, 1}) {
    const auto c = config_for_pack(pack);
    floats = std::max(floats, slice_sum_floats(rows, c.split, c.slice_sums));
  }
  return floats;
}

std::size_t rms_norm_fwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                        int device) {
  const int x_size = static_cast<int>(element_size(x_dtype));
  const DeviceTraits d = device_traits(device);
  return sizeof(float) *
         static_cast<std::size_t>(slice_sum_floats_of(
             rows, hidden, x_size, [&](int pack) { return fwd_config(hidden, pack, x_size, d); }));
}

std::size_t rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                        bool has_weight, int device) {
  const int x_size = static_cast<int>(element_size(x_dtype));
  const DeviceTraits d = device_traits(device);
  const std::int64_t sums = slice_sum_floats_of(
      rows, hidden, x_size, [&](int pack) { return bwd_config(rows, hidden, pack, x_size, d); });
  return sizeof(float) *
         static_cast<std::size_t>(dw_partial_floats(rows, hidden, x_size, has_weight) + sums);
}

void rms_norm_fwd(const detail::RmsNormFwdArgs& a, int device, void* stream) {
  rms_norm::fwd_with_config(a, nullptr, device, stream);
}

namespace rms_norm {

void fwd_with_config(const detail::RmsNormFwdArgs& a, const FwdConfig* forced, int device,
                     void* stream) {
  if (a.rows == 0) return;
  const DeviceGuard guard(device);
  const DeviceTraits d = device_traits(device);
  const auto s = static_cast<cudaStream_t>(stream);
  detail::dispatch_casting_mode(a.params.casting_mode, [&](auto mode) {
    if (a.residual != nullptr) {
      fwd_for_mode<decltype(mode)::value, true>(a, d, forced, s);
    } else {
      fwd_for_mode<decltype(mode)::value, false>(a, d, forced, s);
    }
  });
}

}  // namespace rms_norm

void rms_norm_bwd(const detail::RmsNormBwdArgs& a, int device, void* stream) {
  rms_norm::bwd_with_traits(a, device_traits(device), device, stream);
}

namespace rms_norm {

void bwd_with_traits(const detail::RmsNormBwdArgs& a, DeviceTraits d, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) {  // no rows: dW is a sum of nothing
    if (a.dw != nullptr) {
      TIGON_CUDA_CHECK(cudaMemsetAsync(a.dw, 0, element_size(a.weight_dtype) * a.hidden, s));
    }
    return;
  }
  detail::dispatch_casting_mode(a.params.casting_mode, [&](auto mode) {
    if (a.dh != nullptr) {
      bwd_for_mode<decltype(mode)::value, true>(a, d, s);
    } else {
      bwd_for_mode<decltype(mode)::value, false>(a, d, s);
    }
  });
  if (a.dw != nullptr) finish_dw(a, device, s);
}

}  // namespace rms_norm

}  // namespace tigon::cuda
