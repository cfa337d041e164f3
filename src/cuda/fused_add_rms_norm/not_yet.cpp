// Fused residual add + RMSNorm has no CUDA kernels yet (issue 36): a CUDA build links these,
// which say so. They go when src/cuda/fused_add_rms_norm/ gets its kernels.
#include "ops/fused_add_rms_norm_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(ErrorCode::kBackendUnavailable,
              "tigon::fused_add_rms_norm: not yet on CUDA (CPU tensors only for now; issue 36)");
}
}  // namespace

std::size_t fused_add_rms_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, bool, int) {
  not_yet();
}
void fused_add_rms_norm_fwd(const detail::RmsNormFwdArgs&, int, void*) { not_yet(); }
void fused_add_rms_norm_bwd(const detail::RmsNormBwdArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
