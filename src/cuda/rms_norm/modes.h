// Per-casting-mode entry points of the RMSNorm kernels, each compiled in its own translation unit
// (rms_norm_<mode>.cu). The backward one launches dx and the dW partials; rms_norm.cu finishes dW.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/rms_norm/layout.cuh"
#include "ops/rms_norm_args.h"
#include "tigon/ops/rms_norm.h"

namespace tigon::cuda::rms_norm {

// The forward with the config fwd_config returns for the arguments on `device` (forced null), or
// with *forced: how the tests run every config fwd_config can return for a shape, which must all
// give the same bits. The arguments as tigon::cuda::rms_norm_fwd takes them (validated).
void fwd_with_config(const detail::RmsNormFwdArgs& a, const FwdConfig* forced, int device,
                     void* stream);

// The backward with the configs bwd_config returns for a device of traits `d` (tests: the
// traits of every device must give the same bits; a device without clusters runs SlicePass).
// The workspace must hold what rms_norm_bwd_workspace_size says for a device without clusters.
void bwd_with_traits(const detail::RmsNormBwdArgs& a, DeviceTraits d, int device, void* stream);

// `forced`: null for the config fwd_config returns, else that config (tests).
template <CastingMode kMode>
void fwd_for_mode(const detail::RmsNormFwdArgs& a, DeviceTraits d, const FwdConfig* forced,
                  cudaStream_t stream);

template <CastingMode kMode>
void bwd_for_mode(const detail::RmsNormBwdArgs& a, DeviceTraits d, cudaStream_t stream);

#define TIGON_RMS_NORM_MODE(kind, mode)                                              \
  kind template void fwd_for_mode<mode>(const detail::RmsNormFwdArgs&, DeviceTraits, \
                                        const FwdConfig*, cudaStream_t);             \
  kind template void bwd_for_mode<mode>(const detail::RmsNormBwdArgs&, DeviceTraits, cudaStream_t);

TIGON_RMS_NORM_MODE(extern, CastingMode::kLlama)
TIGON_RMS_NORM_MODE(extern, CastingMode::kGemma)
TIGON_RMS_NORM_MODE(extern, CastingMode::kNone)

}  // namespace tigon::cuda::rms_norm
