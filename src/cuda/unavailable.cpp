// Compiled instead of the CUDA backend when tigon is built without it. The validation layer
// rejects CUDA tensors first (kBackendUnavailable); these bodies are the last line of defence.
#include "ops/cross_entropy_args.h"
#include "ops/divergence_args.h"
#include "ops/dyt_args.h"
#include "ops/fused_add_rms_norm_args.h"
#include "ops/fused_linear_cross_entropy_args.h"
#include "ops/gated_rms_norm_args.h"
#include "ops/group_norm_args.h"
#include "ops/glu_args.h"
#include "ops/layer_norm_args.h"
#include "ops/moe_experts_args.h"
#include "ops/moe_router_args.h"
#include "ops/poly_norm_args.h"
#include "ops/rms_norm_args.h"
#include "ops/rope_args.h"
#include "tigon/error.h"

namespace tigon::cuda {
namespace {
[[noreturn]] void unavailable() {
  throw Error(ErrorCode::kBackendUnavailable, "tigon was built without its CUDA backend");
}
}  // namespace

std::size_t rms_norm_fwd_workspace_size(std::int64_t, std::int64_t, DType, int) { return 0; }
std::size_t rms_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, bool, int) {
  unavailable();
}
void rms_norm_fwd(const detail::RmsNormFwdArgs&, int, void*) { unavailable(); }
void rms_norm_bwd(const detail::RmsNormBwdArgs&, int, void*) { unavailable(); }
void group_norm_fwd(const detail::GroupNormFwdArgs&, int, void*) { unavailable(); }
void group_norm_bwd(const detail::GroupNormBwdArgs&, int, void*) { unavailable(); }
std::size_t layer_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, bool, bool, int) {
  unavailable();
}
void layer_norm_fwd(const detail::LayerNormFwdArgs&, int, void*) { unavailable(); }
std::size_t fused_add_rms_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, bool, int) {
  unavailable();
}
void fused_add_rms_norm_fwd(const detail::RmsNormFwdArgs&, int, void*) { unavailable(); }
std::size_t dyt_bwd_workspace_size(std::int64_t, std::int64_t, bool, int) { unavailable(); }
void dyt_fwd(const detail::DytFwdArgs&, int, void*) { unavailable(); }
void dyt_bwd(const detail::DytBwdArgs&, int, void*) { unavailable(); }
std::size_t poly_norm_bwd_workspace_size(std::int64_t, std::int64_t, int) { unavailable(); }
void poly_norm_fwd(const detail::PolyNormFwdArgs&, int, void*) { unavailable(); }
void poly_norm_bwd(const detail::PolyNormBwdArgs&, int, void*) { unavailable(); }
std::size_t gated_rms_norm_fwd_workspace_size(std::int64_t, std::int64_t, DType, int) {
  unavailable();
}
std::size_t gated_rms_norm_bwd_workspace_size(std::int64_t, std::int64_t, DType, int) {
  unavailable();
}
void gated_rms_norm_fwd(const detail::GatedRmsNormFwdArgs&, int, void*) { unavailable(); }
void gated_rms_norm_bwd(const detail::GatedRmsNormBwdArgs&, int, void*) { unavailable(); }
void fused_add_rms_norm_bwd(const detail::RmsNormBwdArgs&, int, void*) { unavailable(); }
void layer_norm_bwd(const detail::LayerNormBwdArgs&, int, void*) { unavailable(); }
void glu_fwd(const detail::GluFwdArgs&, int, void*) { unavailable(); }
void glu_bwd(const detail::GluBwdArgs&, int, void*) { unavailable(); }
void rope(const detail::RopeArgs&, int, void*) { unavailable(); }
std::size_t moe_experts_fwd_workspace_size(const detail::MoeExpertsShape&, bool, int) {
  unavailable();
}
std::size_t moe_experts_bwd_workspace_size(const detail::MoeExpertsShape&, int) { unavailable(); }
void moe_experts_fwd(const detail::MoeExpertsFwdArgs&, int, void*) { unavailable(); }
void moe_experts_bwd(const detail::MoeExpertsBwdArgs&, int, void*) { unavailable(); }
void moe_router_fwd(const detail::MoeRouterArgs&, int, void*) { unavailable(); }
void moe_router_bwd(const detail::MoeRouterArgs&, int, void*) { unavailable(); }

std::size_t cross_entropy_workspace_size(const detail::CrossEntropyArgs&, bool, int) {
  unavailable();
}
void cross_entropy_fwd(const detail::CrossEntropyArgs&, int, void*) { unavailable(); }
void cross_entropy_bwd(const detail::CrossEntropyArgs&, int, void*) { unavailable(); }
void cross_entropy_scale_grad(const detail::ScaleGradArgs&, int, void*) { unavailable(); }
std::size_t fused_linear_cross_entropy_workspace_size(const detail::FlceArgs&, int) {
  unavailable();
}
void fused_linear_cross_entropy(const detail::FlceArgs&, int, void*) { unavailable(); }
std::size_t divergence_workspace_size(const detail::DivergenceArgs&, int) { unavailable(); }
void divergence_fwd(const detail::DivergenceArgs&, int, void*) { unavailable(); }
void divergence_bwd(const detail::DivergenceArgs&, int, void*) { unavailable(); }

}  // namespace tigon::cuda
