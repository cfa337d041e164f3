// kl_div / jsd / tvd have no CUDA kernels yet (issue 37): a CUDA build links these, which say so.
// They go when src/cuda/divergence/ gets its kernels.
#include "ops/divergence_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(ErrorCode::kBackendUnavailable,
              "tigon::kl_div / jsd / tvd: not yet on CUDA (CPU tensors only for now; issue 37)");
}
}  // namespace

std::size_t divergence_workspace_size(const detail::DivergenceArgs&, int) { not_yet(); }
void divergence_fwd(const detail::DivergenceArgs&, int, void*) { not_yet(); }
void divergence_bwd(const detail::DivergenceArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
