// SwiGLU / GeGLU CUDA backend entry points: make the op's device current and launch the
// activation's kernels (glu_<activation>.cu) on the caller's stream. Never allocates and never
// synchronizes, so the calls can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/glu/entry.h"
#include "ops/glu_args.h"

namespace tigon::cuda {

void glu_fwd(const detail::GluFwdArgs& a, int device, void* stream) {
  if (a.rows == 0 || a.width == 0) return;
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.activation == GluActivation::kGeluTanh) {
    glu::fwd_for_activation<GluActivation::kGeluTanh>(a, s);
  } else {
    glu::fwd_for_activation<GluActivation::kSilu>(a, s);
  }
}

void glu_bwd(const detail::GluBwdArgs& a, int device, void* stream) {
  if (a.rows == 0 || a.width == 0) return;
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.activation == GluActivation::kGeluTanh) {
    glu::bwd_for_activation<GluActivation::kGeluTanh>(a, s);
  } else {
    glu::bwd_for_activation<GluActivation::kSilu>(a, s);
  }
}

}  // namespace tigon::cuda
