// The autograd kernel of tigon::gated_rms_norm_fwd. The backward always writes dx and dgate into
// new buffers (no in-place mode yet; the C++ API allows either in dy's buffer).
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

using FwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                double);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, const Tensor&);

struct GatedRmsNormFwd : torch::autograd::Function<GatedRmsNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& gate,
                               const Tensor& weight, double eps) {
    static const auto fwd = op<FwdSignature>("tigon::gated_rms_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, rstd] = fwd.call(x, gate, weight, eps);
    ctx->save_for_backward({x, gate, weight, rstd});
    ctx->mark_non_differentiable({rstd});
    ctx->set_materialize_grads(false);  // no zero "gradient" of rstd (an allocation and a fill)
    return {y, rstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(4);  // x, gate, weight, eps
    const Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;  // only rstd was used (it has no gradient)
    const variable_list saved = ctx->get_saved_variables();
    static const auto bwd = op<BwdSignature>("tigon::gated_rms_norm_bwd");
    std::tie(out[0], out[1], out[2]) = bwd.call(dy, saved[0], saved[1], saved[2], saved[3]);
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("gated_rms_norm_fwd", &tb::AutogradKernel<tb::GatedRmsNormFwd, tb::FwdSignature>::call);
}
