// The mixture-of-experts experts and router have no CUDA kernels yet (issue 38: permutation and
// grouped GEMM come in the next slice): a CUDA build links these, which say so. They go when
// src/cuda/moe_experts/ gets its kernels.
#include "ops/moe_experts_args.h"
#include "ops/moe_router_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void not_yet() {
  throw Error(
      ErrorCode::kBackendUnavailable,
      "tigon::moe_experts, moe_router: not yet on CUDA (CPU tensors only for now; issue 38)");
}
}  // namespace

std::size_t moe_experts_fwd_workspace_size(const detail::MoeExpertsShape&, bool, int) { not_yet(); }
std::size_t moe_experts_bwd_workspace_size(const detail::MoeExpertsShape&, int) { not_yet(); }
void moe_experts_fwd(const detail::MoeExpertsFwdArgs&, int, void*) { not_yet(); }
void moe_experts_bwd(const detail::MoeExpertsBwdArgs&, int, void*) { not_yet(); }
void moe_router_fwd(const detail::MoeRouterArgs&, int, void*) { not_yet(); }
void moe_router_bwd(const detail::MoeRouterArgs&, int, void*) { not_yet(); }

}  // namespace tigon::cuda
