// Gated RMSNorm CUDA backend entry points: make the op's device current, launch the forward, or
// the backward and RMSNorm's dW finishing kernel, all on the caller's stream. Never allocates and
// never synchronizes, so the calls can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/gated_rms_norm/launch.h"
#include "cuda/gated_rms_norm/layout.cuh"
#include "cuda/rms_norm/dw_finish_launch.cuh"
#include "ops/gated_rms_norm_args.h"

namespace tigon::cuda {

std::size_t gated_rms_norm_fwd_workspace_size(std::int64_t, std::int64_t, DType, int) { return 0; }

std::size_t gated_rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                              int) {
  return sizeof(float) * static_cast<std::size_t>(gated_rms_norm::dw_partial_floats(
                             rows, hidden, static_cast<int>(element_size(x_dtype))));
}

void gated_rms_norm_fwd(const detail::GatedRmsNormFwdArgs& a, int device, void* stream) {
  if (a.rows == 0) return;
  const DeviceGuard guard(device);
  gated_rms_norm::launch_fwd(a, static_cast<cudaStream_t>(stream));
}

void gated_rms_norm_bwd(const detail::GatedRmsNormBwdArgs& a, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.rows == 0) {  // no rows: dW is a sum of nothing
    TIGON_CUDA_CHECK(cudaMemsetAsync(a.dw, 0, element_size(a.weight_dtype) * a.hidden, s));
    return;
  }
  gated_rms_norm::launch_bwd(a, s);
  rms_norm::finish_dw_partials(
      static_cast<const float*>(a.workspace),
      rms_norm::dw_groups(a.rows, a.hidden, static_cast<int>(element_size(a.x_dtype))).groups,
      a.hidden, a.weight_dtype, a.dw, device, s);
}

}  // namespace tigon::cuda
