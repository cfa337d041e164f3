// The autograd kernel of tigon::rms_norm_fwd. With in_place, the backward writes dx into the
// incoming gradient when nothing else can observe it (unobservable.h), else into a new buffer.
#include <ATen/core/LegacyTypeDispatch.h>
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

using FwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const std::optional<Tensor>&, double,
                                                double, c10::string_view, bool);
using BwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&,
                                                const std::optional<Tensor>&, const Tensor&, double,
                                                c10::string_view);
using BwdInplaceSignature = Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   const Tensor&, double, c10::string_view);

struct RmsNormFwd : torch::autograd::Function<RmsNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x,
                               const std::optional<Tensor>& weight, double eps, double offset,
                               c10::string_view casting_mode, bool in_place) {
    static const auto fwd = op<FwdSignature>("tigon::rms_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, rstd] = fwd.call(x, weight, eps, offset, casting_mode, in_place);
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["casting_mode"] = std::string(casting_mode);
    ctx->saved_data["in_place"] = in_place;
    ctx->save_for_backward({x, weight.value_or(Tensor()), rstd});
    ctx->mark_non_differentiable({rstd});
    ctx->set_materialize_grads(false);  // no zero "gradient" of rstd (an allocation and a fill)
    return {y, rstd};
  }

  // grads by non-const reference: see unobservable.h.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(6);  // x, weight, eps, offset, casting_mode, in_place
    Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;  // only rstd was used (it has no gradient)
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const std::optional<Tensor> weight =
        saved[1].defined() ? std::optional<Tensor>(saved[1]) : std::nullopt;
    const double offset = ctx->saved_data["offset"].toDouble();
    const std::string& mode = ctx->saved_data["casting_mode"].toStringRef();
    Tensor dw;
    if (ctx->saved_data["in_place"].toBool() &&
        unobservable(dy, x.scalar_type(), WriteLayout::kRows)) {
      static const auto bwd_inplace = op<BwdInplaceSignature>("tigon::rms_norm_bwd_inplace");
      at::AutoDispatchBelowADInplaceOrView below_autograd;  // dy is ours: no version to bump
      dw = bwd_inplace.call(dy, x, weight, saved[2], offset, mode);
      out[0] = std::move(dy);
    } else {
      static const auto bwd = op<BwdSignature>("tigon::rms_norm_bwd");
      std::tie(out[0], dw) = bwd.call(dy, x, weight, saved[2], offset, mode);
    }
    if (weight) out[1] = std::move(dw);
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("rms_norm_fwd", &tb::AutogradKernel<tb::RmsNormFwd, tb::FwdSignature>::call);
}
