// fused_add_rms_norm's kernels of casting mode kNone: RMSNorm's with the residual compiled in
// (src/cuda/rms_norm/launch.cuh, kResidual). One translation unit per mode: parallel compilation.
#include "cuda/rms_norm/launch.cuh"

namespace tigon::cuda::rms_norm {
TIGON_FUSED_ADD_RMS_NORM_MODE(, CastingMode::kNone)
}  // namespace tigon::cuda::rms_norm
