// Per-casting-mode entry points of the RMSNorm kernels, each compiled in its own translation unit
// (rms_norm_<mode>.cu). The backward one launches dx and the dW partials; rms_norm.cu finishes dW.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/rms_norm/layout.cuh"
#include "ops/rms_norm_args.h"
#include "tigon/ops/rms_norm.h"

namespace tigon::cuda::rms_norm {

// Both dispatch to fused_add_rms_norm's kernels where the arguments carry a residual (dh).
// The forward with the config fwd_config returns for the arguments on `device` (forced null), or
// with *forced: how the tests run every config fwd_config can return for a shape, which must all
// give the same bits. The arguments as tigon::cuda::rms_norm_fwd takes them (validated).
void fwd_with_config(const detail::RmsNormFwdArgs& a, const FwdConfig* forced, int device,
                     void* stream);

// The backward with the configs bwd_config returns for a device of traits `d` (tests: the
// traits of every device must give the same bits; a device without clusters runs SlicePass).
// The workspace must hold what rms_norm_bwd_workspace_size says for a device without clusters.
void bwd_with_traits(const detail::RmsNormBwdArgs& a, DeviceTraits d, int device, void* stream);

// `forced`: null for the config fwd_config returns, else that config (tests). kResidual: the
// kernels of fused_add_rms_norm (the arguments' residual and h, or dh, are set), instantiated in
// src/cuda/fused_add_rms_norm/fused_add_rms_norm_<mode>.cu; plain RMSNorm's in rms_norm_<mode>.cu.
template <CastingMode kMode, bool kResidual>
void fwd_for_mode(const detail::RmsNormFwdArgs& a, DeviceTraits d, const FwdConfig* forced,
                  cudaStream_t stream);

template <CastingMode kMode, bool kResidual>
void bwd_for_mode(const detail::RmsNormBwdArgs& a, DeviceTraits d, cudaStream_t stream);

#define TIGON_RMS_NORM_MODE_VARIANT(kind, mode, residual)                                      \
  kind template void fwd_for_mode<mode, residual>(const detail::RmsNormFwdArgs&, DeviceTraits, \
                                                  const FwdConfig*, cudaStream_t);             \
  kind template void bwd_for_mode<mode, residual>(const detail::RmsNormBwdArgs&, DeviceTraits, \
                                                  cudaStream_t);
#define TIGON_RMS_NORM_MODE(kind, mode) TIGON_RMS_NORM_MODE_VARIANT(kind, mode, false)
#define TIGON_FUSED_ADD_RMS_NORM_MODE(kind, mode) TIGON_RMS_NORM_MODE_VARIANT(kind, mode, true)

TIGON_RMS_NORM_MODE(extern, CastingMode::kLlama)
TIGON_RMS_NORM_MODE(extern, CastingMode::kGemma)
TIGON_RMS_NORM_MODE(extern, CastingMode::kNone)
TIGON_FUSED_ADD_RMS_NORM_MODE(extern, CastingMode::kLlama)
TIGON_FUSED_ADD_RMS_NORM_MODE(extern, CastingMode::kGemma)
TIGON_FUSED_ADD_RMS_NORM_MODE(extern, CastingMode::kNone)

}  // namespace tigon::cuda::rms_norm
