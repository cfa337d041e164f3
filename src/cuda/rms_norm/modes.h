// Per-casting-mode entry points of the RMSNorm kernels, each compiled in its own translation unit
// (rms_norm_<mode>.cu). The backward one launches dx and the dW partials; rms_norm.cu finishes dW.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/rms_norm_args.h"
#include "tigon/ops/rms_norm.h"

namespace tigon::cuda::rms_norm {

template <CastingMode kMode>
void fwd_for_mode(const detail::RmsNormFwdArgs& a, bool clusters, int device, cudaStream_t stream);

template <CastingMode kMode>
void bwd_for_mode(const detail::RmsNormBwdArgs& a, bool clusters, int device, cudaStream_t stream);

#define TIGON_RMS_NORM_MODE(kind, mode)                                                          \
  kind template void fwd_for_mode<mode>(const detail::RmsNormFwdArgs&, bool, int, cudaStream_t); \
  kind template void bwd_for_mode<mode>(const detail::RmsNormBwdArgs&, bool, int, cudaStream_t);

TIGON_RMS_NORM_MODE(extern, CastingMode::kLlama)
TIGON_RMS_NORM_MODE(extern, CastingMode::kGemma)
TIGON_RMS_NORM_MODE(extern, CastingMode::kNone)

}  // namespace tigon::cuda::rms_norm
