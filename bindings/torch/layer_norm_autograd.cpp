// The autograd kernel of tigon::layer_norm_fwd. dx always goes to a new buffer (no in-place
// backward yet).
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "autograd.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const std::optional<Tensor>&,
                                                        const std::optional<Tensor>&, double);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                        const std::optional<Tensor>&,
                                                        const std::optional<Tensor>&, const Tensor&,
                                                        const Tensor&);

std::optional<Tensor> defined_or_none(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

struct LayerNormFwd : torch::autograd::Function<LayerNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x,
                               const std::optional<Tensor>& weight,
                               const std::optional<Tensor>& bias, double eps) {
    static const auto fwd = op<FwdSignature>("tigon::layer_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, mean, rstd] = fwd.call(x, weight, bias, eps);
    // The bias is saved for its dtype (db's) only.
    ctx->save_for_backward({x, weight.value_or(Tensor()), bias.value_or(Tensor()), mean, rstd});
    ctx->mark_non_differentiable({mean, rstd});
    ctx->set_materialize_grads(false);  // no zero "gradient" of mean and rstd
    return {y, mean, rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(4);  // x, weight, bias, eps
    const Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;  // only mean or rstd was used (they have no gradient)
    static const auto bwd = op<BwdSignature>("tigon::layer_norm_bwd");
    const variable_list saved = ctx->get_saved_variables();
    const std::optional<Tensor> weight = defined_or_none(saved[1]);
    const std::optional<Tensor> bias = defined_or_none(saved[2]);
    auto [dx, dw, db] = bwd.call(dy, saved[0], weight, bias, saved[3], saved[4]);
    out[0] = std::move(dx);
    if (weight) out[1] = std::move(dw);
    if (bias) out[2] = std::move(db);
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("layer_norm_fwd", &tb::AutogradKernel<tb::LayerNormFwd, tb::FwdSignature>::call);
}
