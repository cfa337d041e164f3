// DyT has no CUDA kernels yet (issue 36): a CUDA build links these, which say so. They go when
// src/cuda/dyt/ gets its kernels.
#include "ops/dyt_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(ErrorCode::kBackendUnavailable,
              "tigon::dyt: not yet on CUDA (CPU tensors only for now; issue 36)");
}
}  // namespace

std::size_t dyt_bwd_workspace_size(std::int64_t, std::int64_t, bool, int) { not_yet(); }
void dyt_fwd(const detail::DytFwdArgs&, int, void*) { not_yet(); }
void dyt_bwd(const detail::DytBwdArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
