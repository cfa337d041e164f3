// The autograd kernel of tigon::moe_router_fwd: differentiable in the logits through the weights
// (the ids are not differentiable); saves the logits and the ids.
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <utility>

#include "autograd.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, int64_t, bool, bool);
using BwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&, int64_t, bool);

struct MoeRouterFwd : torch::autograd::Function<MoeRouterFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& logits, int64_t top_k,
                               bool renormalize, bool weights_fp32) {
    static const auto fwd = op<FwdSignature>("tigon::moe_router_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [ids, weights] = fwd.call(logits, top_k, renormalize, weights_fp32);
    ctx->mark_non_differentiable({ids});
    ctx->save_for_backward({logits, ids});
    ctx->saved_data["top_k"] = top_k;
    ctx->saved_data["renormalize"] = renormalize;
    ctx->set_materialize_grads(false);
    return {ids, weights};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(4);  // logits, top_k, renormalize, weights_fp32
    const Tensor dw = std::move(grads[1]);
    if (!dw.defined()) return out;
    const variable_list s = ctx->get_saved_variables();
    static const auto bwd = op<BwdSignature>("tigon::moe_router_bwd");
    out[0] = bwd.call(dw, s[0], s[1], ctx->saved_data["top_k"].toInt(),
                      ctx->saved_data["renormalize"].toBool());
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("moe_router_fwd", &tb::AutogradKernel<tb::MoeRouterFwd, tb::FwdSignature>::call);
}
