// Softmax-then-top-k routing operators: schemas and kernels (one per op for every device,
// cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "tigon/ops/moe_router.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "moe_router_fwd";
constexpr const char* kBwd = "moe_router_bwd";

// (topk_ids, topk_weights); weights in float32 (Mixtral) or weights_dtype (Qwen3-MoE: logits').
std::tuple<at::Tensor, at::Tensor> moe_router_fwd(const at::Tensor& logits_arg, int64_t top_k,
                                                  bool renormalize, bool weights_fp32) {
  const CudaContext context(logits_arg);
  return translate_errors([&] {
    const at::Tensor logits = with_row_layout(logits_arg);
    const int64_t n = logits.dim() >= 1 ? logits.size(0) : 0;  // the core checks [N, E]
    at::Tensor ids = at::empty({n, top_k}, logits.options().dtype(at::kLong));
    at::Tensor weights =
        at::empty({n, top_k}, weights_fp32 ? logits.options().dtype(at::kFloat) : logits.options());
    tigon::moe_router_fwd({top_k, renormalize}, to_view(logits, kFwd, "logits"),
                          to_view(ids, kFwd, "topk_ids"), to_view(weights, kFwd, "topk_weights"),
                          context.stream);
    return std::make_tuple(std::move(ids), std::move(weights));
  });
}

at::Tensor moe_router_bwd(const at::Tensor& grad_weights, const at::Tensor& logits_arg,
                          const at::Tensor& topk_ids, int64_t top_k, bool renormalize) {
  const CudaContext context(logits_arg);
  return translate_errors([&] {
    const at::Tensor logits = with_row_layout(logits_arg);
    at::Tensor grad = at::empty(logits.sizes(), logits.options());
    tigon::moe_router_bwd(
        {top_k, renormalize}, to_view(grad_weights.contiguous(), kBwd, "grad_weights"),
        to_view(logits, kBwd, "logits"), to_view(topk_ids.contiguous(), kBwd, "topk_ids"),
        to_view(grad, kBwd, "grad_logits"), context.stream);
    return grad;
  });
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &moe_router_fwd);
  m.impl(kBwd, &moe_router_bwd);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // Fakes in tigon.ops.moe_experts (with the experts'), the autograd kernel in
  // moe_router_autograd.cpp.
  m.set_python_module("tigon.ops.moe_experts");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "moe_router_fwd(Tensor logits, int top_k, bool renormalize, bool weights_fp32) -> "
      "(Tensor topk_ids, Tensor topk_weights)",
      tags);
  m.def(
      "moe_router_bwd(Tensor grad_weights, Tensor logits, Tensor topk_ids, int top_k, "
      "bool renormalize) -> Tensor grad_logits",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
