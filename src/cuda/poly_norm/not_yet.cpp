// PolyNorm has no CUDA kernels yet (issue 36): a CUDA build links these, which say so. They go
// when src/cuda/poly_norm/ gets its kernels.
#include "ops/poly_norm_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(ErrorCode::kBackendUnavailable,
              "tigon::poly_norm: not yet on CUDA (CPU tensors only for now; issue 36)");
}
}  // namespace

std::size_t poly_norm_bwd_workspace_size(std::int64_t, std::int64_t, int) { not_yet(); }
void poly_norm_fwd(const detail::PolyNormFwdArgs&, int, void*) { not_yet(); }
void poly_norm_bwd(const detail::PolyNormBwdArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
