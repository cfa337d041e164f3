// The autograd kernel of tigon::cross_entropy_fwd, in C++: registered from Python
// (torch.library.register_autograd) the same logic cost about 100 us of host time per forward and
// backward (argument re-packing in torch's wrapper), several times the operator itself.
//
// Unless reduction="none", the forward already computed the gradient for upstream 1; it is kept by
// reference, not with save_for_backward, so that the tensor the backward returns is the only
// reference and the leaf's AccumulateGrad adopts it as .grad without a copy. The backward scales
// it in place on the device (a no-op for upstream 1) when nothing else can observe it
// (unobservable.h), else functionally (while torch.compile traces, AOTAutograd cannot mutate a
// saved forward output; a direct caller of the op may hold the gradient output). A second
// backward through the graph is refused. reduction="none" recomputes the gradient
// with the per-row upstream gradient in one pass (cross_entropy_bwd).
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "autograd.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor, Tensor>(const Tensor&, const Tensor&,
                                                                const std::optional<Tensor>&,
                                                                const std::optional<Tensor>&,
                                                                int64_t, c10::string_view, double,
                                                                double, double, bool);
using BwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                            const std::optional<Tensor>&, const std::optional<Tensor>&,
                            const Tensor&, int64_t, c10::string_view, double, double, double);
using ScaleSignature = void(const Tensor&, const Tensor&);
using ScaledSignature = Tensor(const Tensor&, const Tensor&);

struct CrossEntropyFwd : torch::autograd::Function<CrossEntropyFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& logits, const Tensor& target,
                               const std::optional<Tensor>& weight,
                               const std::optional<Tensor>& divisor, int64_t ignore_index,
                               c10::string_view reduction, double label_smoothing,
                               double lse_square_scale, double softcap, bool compute_grad) {
    static const auto fwd = op<FwdSignature>("tigon::cross_entropy_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, z_loss, lse, grad] =
        fwd.call(logits, target, weight, divisor, ignore_index, reduction, label_smoothing,
                 lse_square_scale, softcap, compute_grad);
    const bool fused = compute_grad && reduction != "none";
    ctx->saved_data["fused"] = fused;
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["reduction"] = std::string(reduction);
    ctx->saved_data["label_smoothing"] = label_smoothing;
    ctx->saved_data["lse_square_scale"] = lse_square_scale;
    ctx->saved_data["softcap"] = softcap;
    if (fused) {
      ctx->saved_data["grad"] = grad;
    } else {
      ctx->save_for_backward({logits, target, lse});
      ctx->saved_data["weight"] = weight;
      ctx->saved_data["divisor"] = divisor;
    }
    ctx->mark_non_differentiable({z_loss, lse, grad});
    ctx->set_materialize_grads(false);  // no zero "gradient" of the gradient output
    return {loss, z_loss, lse, grad};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(10);
    const Tensor& grad_loss = grads[0];
    if (!grad_loss.defined()) return out;
    if (ctx->saved_data["fused"].toBool()) {
      c10::IValue& stash = ctx->saved_data["grad"];
      TORCH_CHECK(stash.isTensor(),
                  "tigon: the gradients computed in the forward were already used by a backward "
                  "through this graph (they are scaled in place); run the forward again");
      Tensor grad = std::move(stash).toTensor();
      stash = c10::IValue();
      if (unobservable(grad, grad.scalar_type(), WriteLayout::kRows)) {
        static const auto scale = op<ScaleSignature>("tigon::cross_entropy_scale_grad_");
        at::AutoDispatchBelowADInplaceOrView below_autograd;  // grad is ours: no version to bump
        scale.call(grad, grad_loss);
        out[0] = std::move(grad);
      } else {  // traced, or a direct caller of the op still holds the gradient output
        static const auto scaled = op<ScaledSignature>("tigon::cross_entropy_scale_grad");
        out[0] = scaled.call(grad, grad_loss);
      }
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

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("cross_entropy_fwd", &tb::AutogradKernel<tb::CrossEntropyFwd, tb::FwdSignature>::call);
}
