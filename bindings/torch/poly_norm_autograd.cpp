// The autograd kernel of tigon::poly_norm_fwd. The backward always writes dx into a new buffer (no
// in-place mode yet); it recomputes the three rstd from x (nothing but the inputs is saved).
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

using FwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&, double);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, double);

struct PolyNormFwd : torch::autograd::Function<PolyNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                               const Tensor& bias, double eps) {
    static const auto fwd = op<FwdSignature>("tigon::poly_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor y = fwd.call(x, weight, bias, eps);
    ctx->save_for_backward({x, weight, bias});
    ctx->saved_data["eps"] = eps;
    ctx->set_materialize_grads(false);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(4);  // x, weight, bias, eps
    const Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;
    const variable_list saved = ctx->get_saved_variables();
    static const auto bwd = op<BwdSignature>("tigon::poly_norm_bwd");
    std::tie(out[0], out[1], out[2]) =
        bwd.call(dy, saved[0], saved[1], saved[2], ctx->saved_data["eps"].toDouble());
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("poly_norm_fwd", &tb::AutogradKernel<tb::PolyNormFwd, tb::FwdSignature>::call);
}
