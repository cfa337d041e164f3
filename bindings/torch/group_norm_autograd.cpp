// The autograd kernel of tigon::group_norm_fwd. The backward writes dx into the incoming gradient
// when nothing else can observe it (unobservable.h), else into a new buffer.
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "autograd.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const std::optional<Tensor>&,
                                                        const std::optional<Tensor>&, int64_t,
                                                        double);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                        const std::optional<Tensor>&,
                                                        const std::optional<Tensor>&, const Tensor&,
                                                        const Tensor&);
using BwdInplaceSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&,
                                                       const std::optional<Tensor>&,
                                                       const std::optional<Tensor>&, const Tensor&,
                                                       const Tensor&);

std::optional<Tensor> defined_or_none(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

struct GroupNormFwd : torch::autograd::Function<GroupNormFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x,
                               const std::optional<Tensor>& weight,
                               const std::optional<Tensor>& bias, int64_t groups, double eps) {
    static const auto fwd = op<FwdSignature>("tigon::group_norm_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [y, mean, rstd] = fwd.call(x, weight, bias, groups, eps);
    // The bias is saved for its dtype (db's) only.
    ctx->save_for_backward({x, weight.value_or(Tensor()), bias.value_or(Tensor()), mean, rstd});
    ctx->mark_non_differentiable({mean, rstd});
    ctx->set_materialize_grads(false);  // no zero "gradient" of mean and rstd
    return {y, mean, rstd};
  }

  // grads by non-const reference: see unobservable.h.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(5);  // x, weight, bias, groups, eps
    Tensor dy = std::move(grads[0]);
    if (!dy.defined()) return out;  // only mean or rstd was used (they have no gradient)
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const std::optional<Tensor> weight = defined_or_none(saved[1]);
    const std::optional<Tensor> bias = defined_or_none(saved[2]);
    Tensor dw, db;
    // dx goes into dy's buffer whenever nothing else can see it (a contiguous dy has the layout
    // the core writes).
    if (dy.is_contiguous() && unobservable(dy, x.scalar_type(), WriteLayout::kDense)) {
      static const auto bwd_inplace = op<BwdInplaceSignature>("tigon::group_norm_bwd_inplace");
      at::AutoDispatchBelowADInplaceOrView below_autograd;  // dy is ours: no version to bump
      std::tie(dw, db) = bwd_inplace.call(dy, x, weight, bias, saved[3], saved[4]);
      out[0] = std::move(dy);
    } else {
      static const auto bwd = op<BwdSignature>("tigon::group_norm_bwd");
      std::tie(out[0], dw, db) = bwd.call(dy, x, weight, bias, saved[3], saved[4]);
    }
    if (weight) out[1] = std::move(dw);
    if (bias) out[2] = std::move(db);
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("group_norm_fwd", &tb::AutogradKernel<tb::GroupNormFwd, tb::FwdSignature>::call);
}
