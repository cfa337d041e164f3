// The autograd kernel of tigon::fused_linear_cross_entropy_fwd.
//
// reduction mean or sum: the forward computes the loss and, chunk by chunk, the gradients of
// hidden, weight and bias for upstream gradient 1 (those its grad_* flags ask for); the backward
// only scales them by the upstream gradient on the device, in place when nothing else can observe
// them (stash_forward_grad / scaled_forward_grad, cross_entropy.h). A second backward through the
// graph is refused.
//
// reduction none: the upstream gradient is per row and known only in the backward, so the
// forward keeps its inputs (version-checked) and the backward recomputes the logits chunk by
// chunk with it folded into each row's gradient (tigon::fused_linear_cross_entropy_bwd), for the
// inputs autograd needs a gradient of. The token scale is a constant: no gradient flows to it.
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "autograd.h"
#include "cross_entropy.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&,
    const std::optional<Tensor>&, const std::optional<Tensor>&, const std::optional<Tensor>&,
    int64_t, c10::string_view, double, double, double, bool, int64_t, bool, bool, bool, bool, bool,
    bool);
using BwdSignature = std::tuple<Tensor, Tensor, Tensor>(
    const Tensor&, const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&,
    const std::optional<Tensor>&, const std::optional<Tensor>&, const std::optional<Tensor>&,
    int64_t, c10::string_view, double, double, double, bool, int64_t, bool, bool, bool, bool);

constexpr std::size_t kInputs = 20;  // the forward's arguments

// The differentiable inputs, their position in the schema (also their autograd edge: hidden,
// weight and target are always tensors, and the bias comes next) and the key of their stashed
// gradient.
struct GradInput {
  std::size_t input;
  const char* key;
};
constexpr GradInput kGradInputs[] = {{0, "grad_hidden"}, {1, "grad_weight"}, {3, "grad_bias"}};

std::optional<Tensor> defined_or_none(const Tensor& t) {
  return t.defined() ? std::optional<Tensor>(t) : std::nullopt;
}

struct FusedLinearCrossEntropyFwd : torch::autograd::Function<FusedLinearCrossEntropyFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& hidden, const Tensor& weight,
                               const Tensor& target, const std::optional<Tensor>& bias,
                               const std::optional<Tensor>& class_weight,
                               const std::optional<Tensor>& divisor,
                               const std::optional<Tensor>& token_scale, int64_t ignore_index,
                               c10::string_view reduction, double label_smoothing,
                               double lse_square_scale, double softcap, bool use_token_scaling,
                               int64_t chunk_rows, bool grad_hidden, bool grad_weight,
                               bool grad_bias, bool accum_fp32, bool compute_predicted,
                               bool compute_accuracy) {
    static const auto fwd = op<FwdSignature>("tigon::fused_linear_cross_entropy_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, z_loss, dx, dw, db, predicted, accuracy] = fwd.call(
        hidden, weight, target, bias, class_weight, divisor, token_scale, ignore_index, reduction,
        label_smoothing, lse_square_scale, softcap, use_token_scaling, chunk_rows, grad_hidden,
        grad_weight, grad_bias, accum_fp32, compute_predicted, compute_accuracy);
    const bool recompute = reduction == "none";
    ctx->saved_data["recompute"] = recompute;
    if (recompute) {
      ctx->save_for_backward({hidden, weight, target, bias.value_or(Tensor()),
                              class_weight.value_or(Tensor()), token_scale.value_or(Tensor())});
      ctx->saved_data["ignore_index"] = ignore_index;
      ctx->saved_data["label_smoothing"] = label_smoothing;
      ctx->saved_data["lse_square_scale"] = lse_square_scale;
      ctx->saved_data["softcap"] = softcap;
      ctx->saved_data["use_token_scaling"] = use_token_scaling;
      ctx->saved_data["chunk_rows"] = chunk_rows;
      ctx->saved_data["accum_fp32"] = accum_fp32;
    } else {
      const bool has_bias = bias.has_value() && bias->defined();
      const bool wanted[] = {grad_hidden, grad_weight, grad_bias && has_bias};
      const Tensor* grads[] = {&dx, &dw, &db};
      for (std::size_t i = 0; i < 3; ++i) {
        if (wanted[i]) stash_forward_grad(ctx, kGradInputs[i].key, *grads[i]);
      }
    }
    ctx->mark_non_differentiable({z_loss, dx, dw, db, predicted, accuracy});
    ctx->set_materialize_grads(false);  // no zero "gradients" of the dx/dw/db outputs
    return {loss, z_loss, dx, dw, db, predicted, accuracy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(kInputs);
    const Tensor& grad_loss = grads[0];
    if (!grad_loss.defined()) return out;
    if (ctx->saved_data["recompute"].toBool()) return recomputed(ctx, grad_loss);
    for (const GradInput& g : kGradInputs) {
      if (ctx->saved_data.count(g.key) != 0) {
        out[g.input] = scaled_forward_grad(ctx, g.key, grad_loss);
      }
    }
    return out;
  }

  // reduction none: the gradients for the per-row grad_loss, recomputed.
  static variable_list recomputed(AutogradContext* ctx, const Tensor& grad_loss) {
    static const auto bwd = op<BwdSignature>("tigon::fused_linear_cross_entropy_bwd");
    const variable_list saved = ctx->get_saved_variables();
    const std::optional<Tensor> bias = defined_or_none(saved[3]);
    const bool wanted[] = {ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                           bias.has_value() && ctx->needs_input_grad(3)};
    variable_list out(kInputs);
    if (!wanted[0] && !wanted[1] && !wanted[2]) return out;
    auto& d = ctx->saved_data;
    auto [dx, dw, db] =
        bwd.call(grad_loss, saved[0], saved[1], saved[2], bias, defined_or_none(saved[4]),
                 std::nullopt, defined_or_none(saved[5]), d["ignore_index"].toInt(), "none",
                 d["label_smoothing"].toDouble(), d["lse_square_scale"].toDouble(),
                 d["softcap"].toDouble(), d["use_token_scaling"].toBool(), d["chunk_rows"].toInt(),
                 wanted[0], wanted[1], wanted[2], d["accum_fp32"].toBool());
    Tensor* results[] = {&dx, &dw, &db};
    for (std::size_t i = 0; i < 3; ++i) {
      if (wanted[i]) out[kGradInputs[i].input] = std::move(*results[i]);
    }
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("fused_linear_cross_entropy_fwd",
         &tb::AutogradKernel<tb::FusedLinearCrossEntropyFwd, tb::FwdSignature>::call);
}
