// Fused residual add + RMSNorm CUDA entry points: RMSNorm's (src/cuda/rms_norm/rms_norm.cu), which
// run the kernels' residual instantiations for arguments that carry a residual (dh), with the same
// launch configs, workspace and deterministic dW finish.
#include "ops/fused_add_rms_norm_args.h"

namespace tigon::cuda {

std::size_t fused_add_rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden,
                                                  DType x_dtype, bool has_weight, int device) {
  return rms_norm_bwd_workspace_size(rows, hidden, x_dtype, has_weight, device);
}

void fused_add_rms_norm_fwd(const detail::RmsNormFwdArgs& args, int device, void* stream) {
  rms_norm_fwd(args, device, stream);
}

void fused_add_rms_norm_bwd(const detail::RmsNormBwdArgs& args, int device, void* stream) {
  rms_norm_bwd(args, device, stream);
}

}  // namespace tigon::cuda
