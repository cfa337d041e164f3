// Gated RMSNorm has no CUDA kernels yet (issue 36): a CUDA build links these, which say so. They
// go when src/cuda/gated_rms_norm/ gets its kernels.
#include "ops/gated_rms_norm_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(ErrorCode::kBackendUnavailable,
              "tigon::gated_rms_norm: not yet on CUDA (CPU tensors only for now; issue 36)");
}
}  // namespace

std::size_t gated_rms_norm_fwd_workspace_size(std::int64_t, std::int64_t, DType, int) { not_yet(); }
std::size_t gated_rms_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, int) { not_yet(); }
void gated_rms_norm_fwd(const detail::GatedRmsNormFwdArgs&, int, void*) { not_yet(); }
void gated_rms_norm_bwd(const detail::GatedRmsNormBwdArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
