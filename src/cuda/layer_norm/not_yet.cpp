// LayerNorm has no CUDA kernels yet (issue 36): a CUDA build links these, which say so. They go
// when src/cuda/layer_norm/ gets its kernels.
#include "ops/layer_norm_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(ErrorCode::kBackendUnavailable,
              "tigon::layer_norm: not yet on CUDA (CPU tensors only for now; issue 36)");
}
}  // namespace

std::size_t layer_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, bool, bool, int) {
  not_yet();
}
void layer_norm_fwd(const detail::LayerNormFwdArgs&, int, void*) { not_yet(); }
void layer_norm_bwd(const detail::LayerNormBwdArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
