// The autograd kernels of tigon::kl_div_fwd, jsd_fwd and tvd_fwd, in C++. With compute_grad
// (and a reduction other than "none") the forward computed the gradient for upstream 1; the
// backward scales it as cross-entropy's (stash_forward_grad / scaled_forward_grad,
// cross_entropy.h: in place only when unobservable; a second backward through the graph is
// refused). Otherwise the forward saves input and target and the backward recomputes the gradient
// with the upstream gradient in one pass (*_bwd), per element for "none".
//
// Only the input is differentiated (the student's distribution; the peer's losses do the same):
// a target that requires grad is refused, not silently left without a gradient.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "autograd.h"
#include "convert.h"
#include "cross_entropy.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdResult = std::tuple<Tensor, Tensor>;
using KlFwdSignature = FwdResult(const Tensor&, const Tensor&, c10::string_view, bool, bool);
using KlBwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&, c10::string_view, bool);
using JsdFwdSignature = FwdResult(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                  double, int64_t, bool);
using JsdBwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                               const std::optional<Tensor>&, double, int64_t);
using TvdFwdSignature = FwdResult(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                  c10::string_view, int64_t, bool);
using TvdBwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                               const std::optional<Tensor>&, c10::string_view, int64_t);

void refuse_target_grad(const char* op, const Tensor& target) {
  TORCH_CHECK_VALUE(!(at::GradMode::is_enabled() && target.requires_grad()),
                    argument_message(op, "target",
                                     "a tensor that does not require grad (only the input is "
                                     "differentiated; detach the target)",
                                     "a tensor that requires grad"));
}

// Keeps what the backward needs: the forward's gradient when `fused`, else input, target and
// labels for the recompute.
void save(AutogradContext* ctx, bool fused, const Tensor& grad, const Tensor& input,
          const Tensor& target, const std::optional<Tensor>& labels) {
  ctx->saved_data["fused"] = fused;
  if (fused) {
    stash_forward_grad(ctx, "grad", grad);
  } else {
    ctx->save_for_backward({input, target});
    ctx->saved_data["labels"] = labels;
  }
  ctx->mark_non_differentiable({grad});
  ctx->set_materialize_grads(false);
}

// The gradient of input from a fused forward, or `recompute(input, target, labels)` for it.
template <typename Recompute>
variable_list input_grad(AutogradContext* ctx, const Tensor& grad_loss, std::size_t n_args,
                         Recompute&& recompute) {
  variable_list out(n_args);
  if (!grad_loss.defined()) return out;
  if (ctx->saved_data["fused"].toBool()) {
    out[0] = scaled_forward_grad(ctx, "grad", grad_loss);
    return out;
  }
  const variable_list saved = ctx->get_saved_variables();
  out[0] = recompute(saved[0], saved[1], optional_of(ctx->saved_data["labels"]));
  return out;
}

bool fused(bool compute_grad, c10::string_view reduction) {
  return compute_grad && reduction != "none";
}

struct KlDivFwd : torch::autograd::Function<KlDivFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& target,
                               c10::string_view reduction, bool log_target, bool compute_grad) {
    static const auto fwd = op<KlFwdSignature>("tigon::kl_div_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, grad] = fwd.call(input, target, reduction, log_target, compute_grad);
    ctx->saved_data["reduction"] = std::string(reduction);
    ctx->saved_data["log_target"] = log_target;
    save(ctx, fused(compute_grad, reduction), grad, input, target, std::nullopt);
    return {loss, grad};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    static const auto bwd = op<KlBwdSignature>("tigon::kl_div_bwd");
    return input_grad(ctx, grads[0], 5, [&](const Tensor& x, const Tensor& t, const auto&) {
      return bwd.call(grads[0], x, t, ctx->saved_data["reduction"].toStringRef(),
                      ctx->saved_data["log_target"].toBool());
    });
  }
};

struct JsdFwd : torch::autograd::Function<JsdFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& target,
                               const std::optional<Tensor>& labels, double beta,
                               int64_t ignore_index, bool compute_grad) {
    static const auto fwd = op<JsdFwdSignature>("tigon::jsd_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, grad] = fwd.call(input, target, labels, beta, ignore_index, compute_grad);
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["ignore_index"] = ignore_index;
    save(ctx, compute_grad, grad, input, target, labels);
    return {loss, grad};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    static const auto bwd = op<JsdBwdSignature>("tigon::jsd_bwd");
    return input_grad(ctx, grads[0], 6,
                      [&](const Tensor& x, const Tensor& t, const std::optional<Tensor>& labels) {
                        return bwd.call(grads[0], x, t, labels, ctx->saved_data["beta"].toDouble(),
                                        ctx->saved_data["ignore_index"].toInt());
                      });
  }
};

struct TvdFwd : torch::autograd::Function<TvdFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& input, const Tensor& target,
                               const std::optional<Tensor>& labels, c10::string_view reduction,
                               int64_t ignore_index, bool compute_grad) {
    static const auto fwd = op<TvdFwdSignature>("tigon::tvd_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, grad] = fwd.call(input, target, labels, reduction, ignore_index, compute_grad);
    ctx->saved_data["reduction"] = std::string(reduction);
    ctx->saved_data["ignore_index"] = ignore_index;
    save(ctx, fused(compute_grad, reduction), grad, input, target, labels);
    return {loss, grad};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    static const auto bwd = op<TvdBwdSignature>("tigon::tvd_bwd");
    return input_grad(ctx, grads[0], 6,
                      [&](const Tensor& x, const Tensor& t, const std::optional<Tensor>& labels) {
                        return bwd.call(grads[0], x, t, labels,
                                        ctx->saved_data["reduction"].toStringRef(),
                                        ctx->saved_data["ignore_index"].toInt());
                      });
  }
};

// The Autograd kernels: the target check, then the Function (whose forward runs with grad mode
// off, so the check cannot be made there).
FwdResult kl_div_autograd(const Tensor& input, const Tensor& target, c10::string_view reduction,
                          bool log_target, bool compute_grad) {
  refuse_target_grad("kl_div_fwd", target);
  return AutogradKernel<KlDivFwd, KlFwdSignature>::call(input, target, reduction, log_target,
                                                        compute_grad);
}

FwdResult jsd_autograd(const Tensor& input, const Tensor& target,
                       const std::optional<Tensor>& labels, double beta, int64_t ignore_index,
                       bool compute_grad) {
  refuse_target_grad("jsd_fwd", target);
  return AutogradKernel<JsdFwd, JsdFwdSignature>::call(input, target, labels, beta, ignore_index,
                                                       compute_grad);
}

FwdResult tvd_autograd(const Tensor& input, const Tensor& target,
                       const std::optional<Tensor>& labels, c10::string_view reduction,
                       int64_t ignore_index, bool compute_grad) {
  refuse_target_grad("tvd_fwd", target);
  return AutogradKernel<TvdFwd, TvdFwdSignature>::call(input, target, labels, reduction,
                                                       ignore_index, compute_grad);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("kl_div_fwd", &tb::kl_div_autograd);
  m.impl("jsd_fwd", &tb::jsd_autograd);
  m.impl("tvd_fwd", &tb::tvd_autograd);
}
