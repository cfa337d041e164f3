// The gated RMSNorm launchers, one translation unit each (gated_rms_norm_fwd.cu, _bwd.cu), so the
// kernels compile in parallel; gated_rms_norm.cu holds the entry points.
#pragma once

#include <cuda_runtime_api.h>

#include "ops/gated_rms_norm_args.h"

namespace tigon::cuda::gated_rms_norm {

// The forward with the config `config` returns for the arguments (validated, rows > 0).
void launch_fwd(const detail::GatedRmsNormFwdArgs& a, cudaStream_t stream);

// dx, dgate and the dW partial rows (rows > 0); the caller then finishes dW.
void launch_bwd(const detail::GatedRmsNormBwdArgs& a, cudaStream_t stream);

}  // namespace tigon::cuda::gated_rms_norm
