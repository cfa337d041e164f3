// The autograd kernel of tigon::fused_linear_cross_entropy_fwd. The forward computes the loss and,
// chunk by chunk, the gradients of hidden, weight and bias for upstream gradient 1 (those its
// grad_* flags ask for); the backward only scales them by the upstream gradient on the device,
// in place when nothing else can observe them (stash_forward_grad / scaled_forward_grad,
// cross_entropy.h). A second backward through the graph is refused.
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
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
    const std::optional<Tensor>&, const std::optional<Tensor>&, int64_t, c10::string_view, double,
    double, double, int64_t, bool, bool, bool, bool, bool, bool);

// The differentiable inputs, their position in the schema and the key of their stashed gradient.
struct GradInput {
  std::size_t input;
  const char* key;
};
constexpr GradInput kGradInputs[] = {{0, "grad_hidden"}, {1, "grad_weight"}, {3, "grad_bias"}};

struct FusedLinearCrossEntropyFwd : torch::autograd::Function<FusedLinearCrossEntropyFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& hidden, const Tensor& weight,
                               const Tensor& target, const std::optional<Tensor>& bias,
                               const std::optional<Tensor>& class_weight,
                               const std::optional<Tensor>& divisor, int64_t ignore_index,
                               c10::string_view reduction, double label_smoothing,
                               double lse_square_scale, double softcap, int64_t chunk_rows,
                               bool grad_hidden, bool grad_weight, bool grad_bias, bool accum_fp32,
                               bool compute_predicted, bool compute_accuracy) {
    static const auto fwd = op<FwdSignature>("tigon::fused_linear_cross_entropy_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [loss, z_loss, dx, dw, db, predicted, accuracy] =
        fwd.call(hidden, weight, target, bias, class_weight, divisor, ignore_index, reduction,
                 label_smoothing, lse_square_scale, softcap, chunk_rows, grad_hidden, grad_weight,
                 grad_bias, accum_fp32, compute_predicted, compute_accuracy);
    const bool has_bias = bias.has_value() && bias->defined();
    const bool wanted[] = {grad_hidden, grad_weight, grad_bias && has_bias};
    const Tensor* grads[] = {&dx, &dw, &db};
    for (std::size_t i = 0; i < 3; ++i) {
      if (wanted[i]) stash_forward_grad(ctx, kGradInputs[i].key, *grads[i]);
    }
    ctx->mark_non_differentiable({z_loss, dx, dw, db, predicted, accuracy});
    ctx->set_materialize_grads(false);  // no zero "gradients" of the dx/dw/db outputs
    return {loss, z_loss, dx, dw, db, predicted, accuracy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(18);
    const Tensor& grad_loss = grads[0];
    if (!grad_loss.defined()) return out;
    for (const GradInput& g : kGradInputs) {
      if (ctx->saved_data.count(g.key) != 0) {
        out[g.input] = scaled_forward_grad(ctx, g.key, grad_loss);
      }
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
