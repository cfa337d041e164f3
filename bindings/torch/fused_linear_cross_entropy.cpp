// Fused linear cross-entropy operator: schema and kernel (one for every device, cuda_context.h).
// On CUDA tigon's own cuBLAS handle (per thread and device) runs on torch's current stream with a
// workspace from torch's caching allocator, so the bindings need no torch_cuda.
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

using Outputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Outputs fused_linear_cross_entropy_fwd(
    const at::Tensor& hidden_arg, const at::Tensor& weight_arg, const at::Tensor& target,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& class_weight,
    const std::optional<at::Tensor>& divisor, int64_t ignore_index, std::string_view reduction,
    double label_smoothing, double lse_square_scale, double softcap, int64_t chunk_rows,
    bool grad_hidden, bool grad_weight, bool grad_bias, bool accum_fp32, bool compute_predicted,
    bool compute_accuracy) {
  const CudaContext context(hidden_arg);
  FusedLinearCrossEntropyParams p;
  p.ce = cross_entropy_params(ignore_index, reduction, label_smoothing, lse_square_scale, softcap,
                              kOp);
  p.chunk_rows = chunk_rows;
  return translate_errors([&] {
    const at::Tensor hidden = with_row_layout(hidden_arg);
    const at::Tensor weight = weight_arg.contiguous();
    const at::Tensor tgt = target.contiguous();
    std::optional<at::Tensor> b, cw, div;
    if (bias && bias->defined()) b = bias->contiguous();
    if (class_weight && class_weight->defined()) cw = class_weight->contiguous();
    if (divisor && divisor->defined()) {
      div = divisor->to(hidden.device(), at::kFloat).reshape({1}).contiguous();
    }
    FusedLinearCrossEntropyInputs in;
    in.hidden = to_view(hidden, kOp, "hidden");
    in.weight = to_view(weight, kOp, "weight");
    in.bias = to_view(b, kOp, "bias");
    in.target = to_view(tgt, kOp, "target");
    in.class_weight = to_view(cw, kOp, "class_weight");
    in.divisor = to_view(div, kOp, "divisor");
    const auto opts = hidden.options();
    at::Tensor loss = p.ce.reduction == Reduction::kNone
                          ? at::empty({tgt.numel()}, opts.dtype(at::kFloat))
                          : at::empty({}, opts.dtype(at::kFloat));
    at::Tensor z_loss = at::empty(loss.sizes(), loss.options());
    CrossEntropyOutputs out{to_view(loss.view({-1}), kOp, "loss"),
                            to_view(z_loss.view({-1}), kOp, "z_loss")};
    at::Tensor predicted = at::empty({compute_predicted ? tgt.numel() : 0}, opts.dtype(at::kLong));
    at::Tensor accuracy =
        at::empty(compute_accuracy ? loss.sizes() : at::IntArrayRef{0}, loss.options());
    if (compute_predicted) out.predicted = to_view(predicted, kOp, "predicted");
    if (compute_accuracy) out.accuracy = to_view(accuracy.view({-1}), kOp, "accuracy");
    at::Tensor dx = at::empty(grad_hidden ? hidden.sizes() : at::IntArrayRef{0}, opts);
    // accum_fp32: dW accumulates in float32 (half of it in the workspace, half in dw's own
    // storage) and is rounded to the weight's dtype once, in place.
    p.fp32_weight_grad_accumulation = accum_fp32;
    at::Tensor dw = at::empty(grad_weight ? weight.sizes() : at::IntArrayRef{0}, weight.options());
    at::Tensor db = at::empty(grad_bias && b ? b->sizes() : at::IntArrayRef{0},
                              b ? b->options().dtype(at::kFloat) : opts);
    FusedLinearCrossEntropyGrads g;
    if (grad_hidden) g.hidden = to_view(dx, kOp, "grad_hidden");
    if (grad_weight) g.weight = to_view(dw, kOp, "grad_weight");
    if (grad_bias && b) g.bias = to_view(db, kOp, "grad_bias");
    const auto ws_bytes = fused_linear_cross_entropy_workspace_size(p, in, g);
    at::Tensor ws = at::empty({static_cast<int64_t>(ws_bytes)}, opts.dtype(at::kByte));
    fused_linear_cross_entropy(
        p, in, out, g, Workspace{ws_bytes ? ws.data_ptr() : nullptr, ws_bytes}, context.stream);
    ws.reset();  // back to the allocator before the bias rounding allocates
    if (b && grad_bias) db = db.to(b->scalar_type());
    return std::make_tuple(loss, z_loss, dx, dw, db, predicted, accuracy);
  });
}

void register_kernels(torch::Library& m) { m.impl(kOp, &fused_linear_cross_entropy_fwd); }

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  m.set_python_module("tigon.ops.fused_linear_cross_entropy");
  m.def(
      "fused_linear_cross_entropy_fwd(Tensor hidden, Tensor weight, Tensor target, Tensor? bias, "
      "Tensor? class_weight, Tensor? divisor, int ignore_index, str reduction, "
      "float label_smoothing, float lse_square_scale, float softcap, int chunk_rows, "
      "bool grad_hidden, bool grad_weight, bool grad_bias, bool accum_fp32, "
      "bool compute_predicted=False, bool compute_accuracy=False) -> (Tensor loss, "
      "Tensor z_loss, Tensor grad_hidden, Tensor grad_weight, Tensor grad_bias, "
      "Tensor predicted, Tensor accuracy)",
      {at::Tag::pt2_compliant_tag});
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
