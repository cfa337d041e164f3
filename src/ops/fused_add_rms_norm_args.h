// Fused residual add + RMSNorm after validation: RMSNorm's arguments with the residual fields set
// (src/ops/rms_norm_args.h). The CPU backend is RMSNorm's; CUDA has its own entry points.
#pragma once

#include "ops/rms_norm_args.h"

namespace tigon::cuda {
std::size_t fused_add_rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden,
                                                  DType x_dtype, bool has_weight, int device);
void fused_add_rms_norm_fwd(const detail::RmsNormFwdArgs& args, int device, void* stream);
void fused_add_rms_norm_bwd(const detail::RmsNormBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
