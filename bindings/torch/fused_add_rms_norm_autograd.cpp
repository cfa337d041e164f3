// The autograd kernel of tigon::fused_add_rms_norm_fwd. The backward adds the gradients of both
// outputs (y and the new residual h); the result is the gradient of x and of residual alike, one
// tensor returned twice as autograd's add does. With in_place it is written into h's incoming
// gradient when nothing else can observe it (unobservable.h), else into a new buffer.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "autograd.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                        const std::optional<Tensor>&, double,
                                                        double, c10::string_view, bool);
using BwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                const std::optional<Tensor>&, const Tensor&, double,
                                                c10::string_view);
using BwdInplaceSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                                   const std::optional<Tensor>&, const Tensor&, double,
                                   c10::string_view);

struct FusedAddRmsNormFwd : torch::autograd::Function<FusedAddRmsNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& residual,
                               const std::optional<Tensor>& weight, double eps, double offset,
                               c10::string_view casting_mode, bool in_place) {
    static const auto fwd = op<FwdSignature>("tigon::fused_add_rms_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, h, rstd] = fwd.call(x, residual, weight, eps, offset, casting_mode, in_place);
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["casting_mode"] = std::string(casting_mode);
    ctx->saved_data["in_place"] = in_place;
    ctx->saved_data["y_dtype"] = y.scalar_type();
    ctx->save_for_backward({h, weight.value_or(Tensor()), rstd});
    ctx->mark_non_differentiable({rstd});
    ctx->set_materialize_grads(false);  // no zero "gradient" of rstd (an allocation and a fill)
    return {y, h, rstd};
  }

  // grads by non-const reference: see unobservable.h.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(7);  // x, residual, weight, eps, offset, casting_mode, in_place
    Tensor dy = std::move(grads[0]);
    Tensor dh = std::move(grads[1]);
    if (!dy.defined() && !dh.defined()) return out;  // only rstd was used (it has no gradient)
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& h = saved[0];
    const std::optional<Tensor> weight =
        saved[1].defined() ? std::optional<Tensor>(saved[1]) : std::nullopt;
    // An output nobody used contributes zeros (rare: a decoder layer uses both).
    if (!dy.defined())
      dy = at::zeros(h.sizes(), h.options().dtype(ctx->saved_data["y_dtype"].toScalarType()));
    if (!dh.defined()) dh = at::zeros(h.sizes(), h.options());
    const double offset = ctx->saved_data["offset"].toDouble();
    const std::string& mode = ctx->saved_data["casting_mode"].toStringRef();
    Tensor dx, dw;
    if (ctx->saved_data["in_place"].toBool() &&
        unobservable(dh, h.scalar_type(), WriteLayout::kRows)) {
      static const auto bwd_inplace =
          op<BwdInplaceSignature>("tigon::fused_add_rms_norm_bwd_inplace");
      at::AutoDispatchBelowADInplaceOrView below_autograd;  // dh is ours: no version to bump
      dw = bwd_inplace.call(dh, dy, h, weight, saved[2], offset, mode);
      dx = std::move(dh);
    } else {
      static const auto bwd = op<BwdSignature>("tigon::fused_add_rms_norm_bwd");
      std::tie(dx, dw) = bwd.call(dy, dh, h, weight, saved[2], offset, mode);
    }
    out[1] = dx;  // residual's gradient is x's: the add passes it through
    out[0] = std::move(dx);
    if (weight) out[2] = std::move(dw);
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("fused_add_rms_norm_fwd",
         &tb::AutogradKernel<tb::FusedAddRmsNormFwd, tb::FwdSignature>::call);
}
