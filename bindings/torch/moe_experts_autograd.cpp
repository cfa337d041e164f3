// The autograd kernel of tigon::moe_experts_fwd: the forward saves its per-slot intermediates only
// when autograd records it; the backward computes only the gradients autograd asks for (frozen
// experts: no dW products).
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "autograd.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, std::string_view,
    bool);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, std::string_view,
    std::array<bool, 4>);

// Inputs: hidden 0, topk_ids 1, topk_weights 2, w_gate_up 3, w_down 4.
struct MoeExpertsFwd : torch::autograd::Function<MoeExpertsFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& hidden, const Tensor& topk_ids,
                               const Tensor& topk_weights, const Tensor& w_gate_up,
                               const Tensor& w_down, std::string_view activation, bool save) {
    static const auto fwd = op<FwdSignature>("tigon::moe_experts_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, offsets, sorted, gate_up, expert_out] =
        fwd.call(hidden, topk_ids, topk_weights, w_gate_up, w_down, activation, save);
    ctx->mark_non_differentiable({offsets, sorted, gate_up, expert_out});
    if (save) {
      ctx->save_for_backward({hidden, topk_ids, topk_weights, w_gate_up, w_down, offsets, sorted,
                              gate_up, expert_out});
    }
    ctx->saved_data["activation"] = std::string(activation);
    ctx->set_materialize_grads(false);
    return {out, offsets, sorted, gate_up, expert_out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(7);  // hidden, topk_ids, topk_weights, w_gate_up, w_down, activation, save
    const Tensor dout = std::move(grads[0]);
    if (!dout.defined()) return out;
    const std::array<bool, 4> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(2),
                                      ctx->needs_input_grad(3), ctx->needs_input_grad(4)};
    const variable_list s = ctx->get_saved_variables();
    const std::string activation = ctx->saved_data["activation"].toStringRef();
    static const auto bwd = op<BwdSignature>("tigon::moe_experts_bwd");
    auto [d_hidden, d_weights, d_gate_up, d_down] =
        bwd.call(dout, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], activation, mask);
    if (mask[0]) out[0] = std::move(d_hidden);
    if (mask[1]) out[2] = std::move(d_weights);
    if (mask[2]) out[3] = std::move(d_gate_up);
    if (mask[3]) out[4] = std::move(d_down);
    return out;
  }
};

// The forward saves what the backward needs whenever autograd will record it (grad mode on and a
// differentiable input that requires grad; inside Function::forward grad mode is off and the
// graph not yet wired, so it is decided here), or when the caller asks.
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> moe_experts_fwd_autograd(
    const Tensor& hidden, const Tensor& topk_ids, const Tensor& topk_weights,
    const Tensor& w_gate_up, const Tensor& w_down, std::string_view activation, bool save) {
  const bool recorded =
      at::GradMode::is_enabled() && (hidden.requires_grad() || topk_weights.requires_grad() ||
                                     w_gate_up.requires_grad() || w_down.requires_grad());
  variable_list r = MoeExpertsFwd::apply(hidden, topk_ids, topk_weights, w_gate_up, w_down,
                                         activation, save || recorded);
  return {std::move(r[0]), std::move(r[1]), std::move(r[2]), std::move(r[3]), std::move(r[4])};
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  m.impl("moe_experts_fwd", &tigon::torch_binding::moe_experts_fwd_autograd);
}
