// The RMSNorm kernels of casting mode kNone (one translation unit per mode: parallel compilation).
#include "cuda/rms_norm/launch.cuh"

namespace tigon::cuda::rms_norm {
TIGON_RMS_NORM_MODE(, CastingMode::kNone)
}  // namespace tigon::cuda::rms_norm
