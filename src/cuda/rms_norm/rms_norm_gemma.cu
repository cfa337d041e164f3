// The RMSNorm kernels of casting mode kGemma (one translation unit per mode: parallel compilation).
#include "cuda/rms_norm/launch.cuh"

namespace tigon::cuda::rms_norm {
TIGON_RMS_NORM_MODE(, CastingMode::kGemma)
}  // namespace tigon::cuda::rms_norm
