// The autograd kernel of tigon::gated_rms_norm_fwd. With in_place, dx is written into the
// incoming gradient when nothing else can observe it (unobservable.h), else into a new buffer;
// dgate always gets a new one.
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <utility>

#include "autograd.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double,
                                                bool);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, const Tensor&);
using BwdInplaceSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                       const Tensor&, const Tensor&);

struct GatedRmsNormFwd : torch::autograd::Function<GatedRmsNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& gate,
                               const Tensor& weight, double eps, bool in_place) {
    static const auto fwd = op<FwdSignature>("tigon::gated_rms_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, rstd] = fwd.call(x, gate, weight, eps, in_place);
    ctx->saved_data["in_place"] = in_place;
    ctx->save_for_backward({x, gate, weight, rstd});
    ctx->mark_non_differentiable({rstd});
    ctx->set_materialize_grads(false);  // no zero "gradient" of rstd (an allocation and a fill)
    return {y, rstd};
  }

  // grads by non-const reference: see unobservable.h.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(5);  // x, gate, weight, eps, in_place
    Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;  // only rstd was used (it has no gradient)
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    if (ctx->saved_data["in_place"].toBool() &&
        unobservable(dy, x.scalar_type(), WriteLayout::kRows)) {
      static const auto bwd_inplace = op<BwdInplaceSignature>("tigon::gated_rms_norm_bwd_inplace");
      at::AutoDispatchBelowADInplaceOrView below_autograd;  // dy is ours: no version to bump
      std::tie(out[1], out[2]) = bwd_inplace.call(dy, x, saved[1], saved[2], saved[3]);
      out[0] = std::move(dy);
    } else {
      static const auto bwd = op<BwdSignature>("tigon::gated_rms_norm_bwd");
      std::tie(out[0], out[1], out[2]) = bwd.call(dy, x, saved[1], saved[2], saved[3]);
    }
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("gated_rms_norm_fwd", &tb::AutogradKernel<tb::GatedRmsNormFwd, tb::FwdSignature>::call);
}
