// Fused linear cross-entropy operators: schemas and kernels (one per op for every device,
// cuda_context.h). On CUDA tigon's own cuBLAS handle (per thread and device) runs on torch's
// current stream with a workspace from torch's caching allocator, so the bindings need no
// torch_cuda.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "tigon/ops/fused_linear_cross_entropy.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kOp = "fused_linear_cross_entropy_fwd";
constexpr const char* kBwdOp = "fused_linear_cross_entropy_bwd";

using Outputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Owns the (possibly copied or cast) tensors the views point into.
struct Inputs {
  at::Tensor hidden, weight, target;
  std::optional<at::Tensor> bias, class_weight, divisor, token_scale;
  FusedLinearCrossEntropyInputs views;
};

Inputs make_inputs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& target,
                   const std::optional<at::Tensor>& bias,
                   const std::optional<at::Tensor>& class_weight,
                   const std::optional<at::Tensor>& divisor,
                   const std::optional<at::Tensor>& token_scale, const char* op) {
  Inputs in;
  in.hidden = with_row_layout(hidden);
  in.weight = weight.contiguous();
  in.target = target.contiguous();
  if (bias && bias->defined()) in.bias = bias->contiguous();
  if (class_weight && class_weight->defined()) in.class_weight = class_weight->contiguous();
  if (divisor && divisor->defined()) {
    in.divisor = divisor->to(hidden.device(), at::kFloat).reshape({1}).contiguous();
  }
  if (token_scale && token_scale->defined())
    in.token_scale = token_scale->to(at::kFloat).contiguous();
  in.views.hidden = to_view(in.hidden, op, "hidden");
  in.views.weight = to_view(in.weight, op, "weight");
  in.views.bias = to_view(in.bias, op, "bias");
  in.views.target = to_view(in.target, op, "target");
  in.views.class_weight = to_view(in.class_weight, op, "class_weight");
  in.views.divisor = to_view(in.divisor, op, "divisor");
  in.views.token_scale = to_view(in.token_scale, op, "token_scale");
  return in;
}

// The gradient buffers the grad_* flags ask for ([0] tensors otherwise): dX in the hidden
// states' dtype, dW in the weight's, db in float32 (rounded to the bias's dtype by finish_bias).
struct GradBuffers {
  at::Tensor dx, dw, db;
  FusedLinearCrossEntropyGrads views;

  GradBuffers(const Inputs& in, bool grad_hidden, bool grad_weight, bool grad_bias,
              const char* op) {
    const auto opts = in.hidden.options();
    dx = at::empty(grad_hidden ? in.hidden.sizes() : at::IntArrayRef{0}, opts);
    dw = at::empty(grad_weight ? in.weight.sizes() : at::IntArrayRef{0}, in.weight.options());
    db = at::empty(grad_bias && in.bias ? in.bias->sizes() : at::IntArrayRef{0},
                   in.bias ? in.bias->options().dtype(at::kFloat) : opts);
    if (grad_hidden) views.hidden = to_view(dx, op, "grad_hidden");
    if (grad_weight) views.weight = to_view(dw, op, "grad_weight");
    if (grad_bias && in.bias) views.bias = to_view(db, op, "grad_bias");
  }

  void finish_bias(const Inputs& in) {
    if (in.bias && views.bias.defined()) db = db.to(in.bias->scalar_type());
  }
};

FusedLinearCrossEntropyParams params_of(int64_t ignore_index, std::string_view reduction,
                                        double label_smoothing, double lse_square_scale,
                                        double softcap, bool use_token_scaling, int64_t chunk_rows,
                                        bool accum_fp32, const char* op) {
  FusedLinearCrossEntropyParams p;
  p.ce =
      cross_entropy_params(ignore_index, reduction, label_smoothing, lse_square_scale, softcap, op);
  p.use_token_scaling = use_token_scaling;
  p.chunk_rows = chunk_rows;
  // accum_fp32: dW accumulates in float32 (half of it in the workspace, half in dw's own
  // storage) and is rounded to the weight's dtype once, in place.
  p.fp32_weight_grad_accumulation = accum_fp32;
  return p;
}

at::Tensor workspace_tensor(std::size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

Workspace to_workspace(const at::Tensor& ws) {
  return Workspace{ws.numel() ? ws.data_ptr() : nullptr, static_cast<std::size_t>(ws.numel())};
}

Outputs fused_linear_cross_entropy_fwd(
    const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& target,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& class_weight,
    const std::optional<at::Tensor>& divisor, const std::optional<at::Tensor>& token_scale,
    int64_t ignore_index, std::string_view reduction, double label_smoothing,
    double lse_square_scale, double softcap, bool use_token_scaling, int64_t chunk_rows,
    bool grad_hidden, bool grad_weight, bool grad_bias, bool accum_fp32, bool compute_predicted,
    bool compute_accuracy) {
  const CudaContext context(hidden);
  const FusedLinearCrossEntropyParams p =
      params_of(ignore_index, reduction, label_smoothing, lse_square_scale, softcap,
                use_token_scaling, chunk_rows, accum_fp32, kOp);
  return translate_errors([&] {
    const Inputs in =
        make_inputs(hidden, weight, target, bias, class_weight, divisor, token_scale, kOp);
    const auto opts = in.hidden.options();
    at::Tensor loss = p.ce.reduction == Reduction::kNone
                          ? at::empty({in.target.numel()}, opts.dtype(at::kFloat))
                          : at::empty({}, opts.dtype(at::kFloat));
    at::Tensor z_loss = at::empty(loss.sizes(), loss.options());
    CrossEntropyOutputs out{to_view(loss.view({-1}), kOp, "loss"),
                            to_view(z_loss.view({-1}), kOp, "z_loss")};
    at::Tensor predicted =
        at::empty({compute_predicted ? in.target.numel() : 0}, opts.dtype(at::kLong));
    at::Tensor accuracy =
        at::empty(compute_accuracy ? loss.sizes() : at::IntArrayRef{0}, loss.options());
    if (compute_predicted) out.predicted = to_view(predicted, kOp, "predicted");
    if (compute_accuracy) out.accuracy = to_view(accuracy.view({-1}), kOp, "accuracy");
    GradBuffers g(in, grad_hidden, grad_weight, grad_bias, kOp);
    const auto ws_bytes = fused_linear_cross_entropy_workspace_size(p, in.views, g.views);
    at::Tensor ws = workspace_tensor(ws_bytes, in.hidden);
    fused_linear_cross_entropy(p, in.views, out, g.views, to_workspace(ws), context.stream);
    ws.reset();  // back to the allocator before the bias rounding allocates
    g.finish_bias(in);
    return std::make_tuple(loss, z_loss, g.dx, g.dw, g.db, predicted, accuracy);
  });
}

Grads fused_linear_cross_entropy_bwd(
    const at::Tensor& grad_loss, const at::Tensor& hidden, const at::Tensor& weight,
    const at::Tensor& target, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& class_weight, const std::optional<at::Tensor>& divisor,
    const std::optional<at::Tensor>& token_scale, int64_t ignore_index, std::string_view reduction,
    double label_smoothing, double lse_square_scale, double softcap, bool use_token_scaling,
    int64_t chunk_rows, bool grad_hidden, bool grad_weight, bool grad_bias, bool accum_fp32) {
  const CudaContext context(hidden);
  const FusedLinearCrossEntropyParams p =
      params_of(ignore_index, reduction, label_smoothing, lse_square_scale, softcap,
                use_token_scaling, chunk_rows, accum_fp32, kBwdOp);
  return translate_errors([&] {
    const Inputs in =
        make_inputs(hidden, weight, target, bias, class_weight, divisor, token_scale, kBwdOp);
    // An expanded upstream (the gradient of a sum has stride 0) becomes a contiguous copy.
    const at::Tensor up = grad_loss.to(at::kFloat).contiguous().view({-1});
    GradBuffers g(in, grad_hidden, grad_weight, grad_bias, kBwdOp);
    const auto ws_bytes = fused_linear_cross_entropy_bwd_workspace_size(p, in.views, g.views);
    at::Tensor ws = workspace_tensor(ws_bytes, in.hidden);
    fused_linear_cross_entropy_bwd(p, in.views, to_view(up, kBwdOp, "grad_loss"), g.views,
                                   to_workspace(ws), context.stream);
    ws.reset();
    g.finish_bias(in);
    return std::make_tuple(g.dx, g.dw, g.db);
  });
}

void register_kernels(torch::Library& m) {
  m.impl(kOp, &fused_linear_cross_entropy_fwd);
  m.impl(kBwdOp, &fused_linear_cross_entropy_bwd);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  m.set_python_module("tigon.ops.fused_linear_cross_entropy");
  m.def(
      "fused_linear_cross_entropy_fwd(Tensor hidden, Tensor weight, Tensor target, Tensor? bias, "
      "Tensor? class_weight, Tensor? divisor, Tensor? token_scale, int ignore_index, "
      "str reduction, float label_smoothing, float lse_square_scale, float softcap, "
      "bool use_token_scaling, int chunk_rows, "
      "bool grad_hidden, bool grad_weight, bool grad_bias, bool accum_fp32, "
      "bool compute_predicted=False, bool compute_accuracy=False) -> (Tensor loss, "
      "Tensor z_loss, Tensor grad_hidden, Tensor grad_weight, Tensor grad_bias, "
      "Tensor predicted, Tensor accuracy)",
      {at::Tag::pt2_compliant_tag});
  m.def(
      "fused_linear_cross_entropy_bwd(Tensor grad_loss, Tensor hidden, Tensor weight, "
      "Tensor target, Tensor? bias, Tensor? class_weight, Tensor? divisor, Tensor? token_scale, "
      "int ignore_index, str reduction, float label_smoothing, float lse_square_scale, "
      "float softcap, bool use_token_scaling, int chunk_rows, bool grad_hidden, "
      "bool grad_weight, bool grad_bias, bool accum_fp32) -> (Tensor grad_hidden, "
      "Tensor grad_weight, Tensor grad_bias)",
      {at::Tag::pt2_compliant_tag});
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
