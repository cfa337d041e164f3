// The autograd kernels of tigon::cross_entropy_fwd and tigon::cross_entropy_fwd_inplace, in C++:
// registered from Python (torch.library.register_autograd, or an autograd.Function) the same logic
// cost about 100 us of host time per forward and backward (argument re-packing in torch's
// wrapper), several times the operator itself.
//
// cross_entropy_fwd: unless reduction="none", the forward already computed the gradient for
// upstream 1; the backward scales it (stash_forward_grad / scaled_forward_grad, cross_entropy.h;
// also used by fused linear cross-entropy). A second backward through the graph is refused.
// reduction="none" recomputes the gradient with the per-row upstream gradient in one pass
// (cross_entropy_bwd).
//
// cross_entropy_fwd_inplace: the forward writes the gradient for upstream 1 over the logits, an
// overwrite the caller asked for (cross_entropy(in_place=True)), and bumps their version (autograd
// then rejects a backward that needs the original logits); the backward scales that buffer in
// place, or into a new buffer while torch.compile traces or when the graph is kept for another
// backward (retain_graph), which must see the unscaled gradient again.
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "autograd.h"
#include "cross_entropy.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const std::optional<Tensor>&, const std::optional<Tensor>&,
    int64_t, c10::string_view, double, double, double, bool, bool, bool);
using FwdInplaceSignature = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const std::optional<Tensor>&, const std::optional<Tensor>&,
    int64_t, c10::string_view, double, double, double, bool, bool);
using BwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                            const std::optional<Tensor>&, const std::optional<Tensor>&,
                            const Tensor&, int64_t, c10::string_view, double, double, double);

// grad *= grad_loss (cross_entropy_scale_grad_), the version of grad bumped or not.
void scale_in_place(const Tensor& grad, const Tensor& grad_loss, bool bump_version) {
  static const auto scale =
      op<void(const Tensor&, const Tensor&)>("tigon::cross_entropy_scale_grad_");
  if (bump_version) {
    at::AutoDispatchBelowAutograd below_autograd;
    scale.call(grad, grad_loss);
  } else {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    scale.call(grad, grad_loss);
  }
}

// grad * grad_loss in a new buffer (cross_entropy_scale_grad).
Tensor scaled_copy(const Tensor& grad, const Tensor& grad_loss) {
  static const auto scaled =
      op<Tensor(const Tensor&, const Tensor&)>("tigon::cross_entropy_scale_grad");
  return scaled.call(grad, grad_loss);
}

struct CrossEntropyFwd : torch::autograd::Function<CrossEntropyFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& logits, const Tensor& target,
                               const std::optional<Tensor>& weight,
                               const std::optional<Tensor>& divisor, int64_t ignore_index,
                               c10::string_view reduction, double label_smoothing,
                               double lse_square_scale, double softcap, bool compute_grad,
                               bool compute_predicted, bool compute_accuracy) {
    static const auto fwd = op<FwdSignature>("tigon::cross_entropy_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, z_loss, lse, grad, predicted, accuracy] =
        fwd.call(logits, target, weight, divisor, ignore_index, reduction, label_smoothing,
                 lse_square_scale, softcap, compute_grad, compute_predicted, compute_accuracy);
    const bool fused = compute_grad && reduction != "none";
    ctx->saved_data["fused"] = fused;
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["reduction"] = std::string(reduction);
    ctx->saved_data["label_smoothing"] = label_smoothing;
    ctx->saved_data["lse_square_scale"] = lse_square_scale;
    ctx->saved_data["softcap"] = softcap;
    if (fused) {
      stash_forward_grad(ctx, "grad", grad);
    } else {
      ctx->save_for_backward({logits, target, lse});
      ctx->saved_data["weight"] = weight;
      ctx->saved_data["divisor"] = divisor;
    }
    ctx->mark_non_differentiable({z_loss, lse, grad, predicted, accuracy});
    ctx->set_materialize_grads(false);  // no zero "gradient" of the gradient output
    return {loss, z_loss, lse, grad, predicted, accuracy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(12);
    const Tensor& grad_loss = grads[0];
    if (!grad_loss.defined()) return out;
    if (ctx->saved_data["fused"].toBool()) {
      out[0] = scaled_forward_grad(ctx, "grad", grad_loss);
      return out;
    }
    static const auto bwd = op<BwdSignature>("tigon::cross_entropy_bwd");
    const variable_list saved = ctx->get_saved_variables();
    const std::string reduction = ctx->saved_data["reduction"].toStringRef();
    out[0] = bwd.call(
        grad_loss, saved[0], saved[1], optional_of(ctx->saved_data["weight"]),
        optional_of(ctx->saved_data["divisor"]), saved[2], ctx->saved_data["ignore_index"].toInt(),
        reduction, ctx->saved_data["label_smoothing"].toDouble(),
        ctx->saved_data["lse_square_scale"].toDouble(), ctx->saved_data["softcap"].toDouble());
    return out;
  }
};

struct CrossEntropyFwdInplace : torch::autograd::Function<CrossEntropyFwdInplace> {
  static variable_list forward(AutogradContext* ctx, const Tensor& logits, const Tensor& target,
                               const std::optional<Tensor>& weight,
                               const std::optional<Tensor>& divisor, int64_t ignore_index,
                               c10::string_view reduction, double label_smoothing,
                               double lse_square_scale, double softcap, bool compute_predicted,
                               bool compute_accuracy) {
    static const auto fwd = op<FwdInplaceSignature>("tigon::cross_entropy_fwd_inplace");
    at::AutoDispatchBelowAutograd below_autograd;  // ADInplaceOrView bumps the logits' version
    auto [loss, z_loss, lse, predicted, accuracy] =
        fwd.call(logits, target, weight, divisor, ignore_index, reduction, label_smoothing,
                 lse_square_scale, softcap, compute_predicted, compute_accuracy);
    ctx->save_for_backward({logits});  // now the gradient for upstream 1
    ctx->mark_non_differentiable({z_loss, lse, predicted, accuracy});
    ctx->set_materialize_grads(false);  // no zero "gradient" of z_loss (an allocation and a fill)
    return {loss, z_loss, lse, predicted, accuracy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(11);
    const Tensor& grad_loss = grads[0];
    if (!grad_loss.defined()) return out;
    Tensor grad = ctx->get_saved_variables()[0];
    if (traced(grad) || torch::autograd::get_current_graph_task_keep_graph()) {
      out[0] = scaled_copy(grad, grad_loss);
    } else {
      scale_in_place(grad, grad_loss, /*bump_version=*/true);  // the caller's logits
      out[0] = std::move(grad);
    }
    return out;
  }
};

}  // namespace

void stash_forward_grad(AutogradContext* ctx, const char* key, const Tensor& grad) {
  ctx->saved_data[key] = grad;
}

Tensor scaled_forward_grad(AutogradContext* ctx, const char* key, const Tensor& grad_loss) {
  c10::IValue& stash = ctx->saved_data[key];
  TORCH_CHECK(stash.isTensor(),
              "tigon: the gradients computed in the forward were already used by a backward "
              "through this graph (they are scaled in place); run the forward again");
  Tensor grad = std::move(stash).toTensor();
  stash = c10::IValue();
  if (unobservable(grad, grad.scalar_type(), WriteLayout::kRows)) {
    scale_in_place(grad, grad_loss, /*bump_version=*/false);  // grad is ours
    return grad;
  }
  return scaled_copy(grad, grad_loss);
}

}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("cross_entropy_fwd", &tb::AutogradKernel<tb::CrossEntropyFwd, tb::FwdSignature>::call);
  m.impl("cross_entropy_fwd_inplace",
         &tb::AutogradKernel<tb::CrossEntropyFwdInplace, tb::FwdInplaceSignature>::call);
}
