// The autograd kernel of tigon::dyt_fwd. The backward always writes dx into a new buffer (no
// in-place mode yet).
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

using FwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                            const std::optional<Tensor>&);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                                const Tensor&, const Tensor&,
                                                                const std::optional<Tensor>&);

struct DytFwd : torch::autograd::Function<DytFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& alpha,
                               const Tensor& gamma, const std::optional<Tensor>& beta) {
    static const auto fwd = op<FwdSignature>("tigon::dyt_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor y = fwd.call(x, alpha, gamma, beta);
    ctx->save_for_backward({x, alpha, gamma, beta.value_or(Tensor())});
    ctx->set_materialize_grads(false);
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(4);  // x, alpha, gamma, beta
    const Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;
    const variable_list saved = ctx->get_saved_variables();
    const std::optional<Tensor> beta =
        saved[3].defined() ? std::optional<Tensor>(saved[3]) : std::nullopt;
    static const auto bwd = op<BwdSignature>("tigon::dyt_bwd");
    Tensor dbeta;
    std::tie(out[0], out[1], out[2], dbeta) = bwd.call(dy, saved[0], saved[1], saved[2], beta);
    if (beta) out[3] = std::move(dbeta);
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("dyt_fwd", &tb::AutogradKernel<tb::DytFwd, tb::FwdSignature>::call);
}
