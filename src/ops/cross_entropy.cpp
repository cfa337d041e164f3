// Cross-entropy: the one validation point, then dispatch to a backend.
#include "tigon/ops/cross_entropy.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "ops/cross_entropy_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::check_dtype;
using detail::contiguous_numel;

using detail::CrossEntropyArgs;

void check_params(const char* op, const CrossEntropyParams& p) {
  const int r = static_cast<int>(p.reduction);
  TIGON_CHECK_ARG(r >= 0 && r <= 2, op, "reduction", "kNone, kSum or kMean", std::to_string(r));
  TIGON_CHECK_ARG(p.label_smoothing >= 0.0f && p.label_smoothing <= 1.0f, op, "label_smoothing",
                  "a value in [0, 1]", std::to_string(p.label_smoothing));
  TIGON_CHECK_ARG(std::isfinite(p.lse_square_scale) && p.lse_square_scale >= 0.0f, op,
                  "lse_square_scale", "a finite value >= 0", std::to_string(p.lse_square_scale));
  TIGON_CHECK_ARG(std::isfinite(p.softcap) && p.softcap >= 0.0f, op, "softcap",
                  "0 (off) or a finite value > 0", std::to_string(p.softcap));
}

void check_device(const char* op, const char* arg, const TensorView& t, Device device) {
  detail::check_device(op, arg, t, device, "the logits' device");
}

// A float32 tensor of `numel` elements on `device` ("what" describes the expected shape).
float* float_buffer(const char* op, const char* arg, const TensorView& t, Device device,
                    std::int64_t numel, const std::string& what) {
  check_device(op, arg, t, device);
  check_dtype(op, arg, t.dtype, DType::kFloat32);
  const std::int64_t got = contiguous_numel(op, arg, t);
  TIGON_CHECK_ARG(got == numel, op, arg, what, detail::shape_string(t));
  return static_cast<float*>(t.data);
}

// Validates the inputs and fills everything but outputs and workspace.
CrossEntropyArgs checked_inputs(const char* op, const CrossEntropyParams& params,
                                const CrossEntropyInputs& in) {
  check_params(op, params);
  const TensorView& logits = in.logits;
  TIGON_CHECK_ARG(is_floating(logits.dtype), op, "logits", "dtype float32, float16 or bfloat16",
                  dtype_name(logits.dtype), ErrorCode::kTypeError);
  const detail::RowLayout l = detail::row_layout(op, "logits", logits);
  TIGON_CHECK_ARG(l.hidden > 0 || l.rows == 0, op, "logits", "a last dimension (vocabulary) >= 1",
                  detail::shape_string(logits));
  detail::check_backend(op, "logits", logits.device);
  const Device device = logits.device;
  detail::check_cuda_vocab(op, "logits", l.hidden, device);

  CrossEntropyArgs a;
  a.params = params;
  a.rows = l.rows;
  a.vocab = l.hidden;
  a.logits = logits.data;
  a.logits_row_stride = l.row_stride;
  a.logits_dtype = logits.dtype;

  check_device(op, "target", in.target, device);
  check_dtype(op, "target", in.target.dtype, DType::kInt64);
  const std::int64_t n_target = contiguous_numel(op, "target", in.target);
  TIGON_CHECK_ARG(n_target == l.rows, op, "target",
                  std::to_string(l.rows) + " elements (one per row of logits)",
                  detail::shape_string(in.target));
  a.target = static_cast<const std::int64_t*>(in.target.data);

  if (in.weight.defined()) {
    check_device(op, "weight", in.weight, device);
    TIGON_CHECK_ARG(is_floating(in.weight.dtype), op, "weight",
                    "dtype float32, float16 or bfloat16", dtype_name(in.weight.dtype),
                    ErrorCode::kTypeError);
    const std::int64_t n = contiguous_numel(op, "weight", in.weight);
    TIGON_CHECK_ARG(n == l.hidden, op, "weight",
                    std::to_string(l.hidden) + " elements (one per class)",
                    detail::shape_string(in.weight));
    a.weight = in.weight.data;
    a.weight_dtype = in.weight.dtype;
  }
  if (in.divisor.defined()) {
    TIGON_CHECK_ARG(params.reduction == Reduction::kSum, op, "divisor",
                    "no divisor unless reduction is sum", reduction_name(params.reduction));
    a.divisor = float_buffer(op, "divisor", in.divisor, device, 1, "one element");
  }
  return a;
}

void check_grad(const char* op, const CrossEntropyInputs& in, CrossEntropyArgs& a,
                const TensorView& grad) {
  check_device(op, "grad_logits", grad, in.logits.device);
  check_dtype(op, "grad_logits", grad.dtype, in.logits.dtype);
  bool same = grad.ndim == in.logits.ndim;
  for (int d = 0; same && d < grad.ndim; ++d) same = grad.sizes[d] == in.logits.sizes[d];
  TIGON_CHECK_ARG(same, op, "grad_logits",
                  "shape " + detail::shape_string(in.logits) + " (the logits' shape)",
                  detail::shape_string(grad));
  const detail::RowLayout g = detail::row_layout(op, "grad_logits", grad);
  if (grad.data == in.logits.data && a.rows > 1) {
    TIGON_CHECK_ARG(g.row_stride == a.logits_row_stride, op, "grad_logits",
                    "the logits' row stride when written into the logits",
                    std::to_string(g.row_stride));
  }
  a.grad = grad.data;
  a.grad_row_stride = g.row_stride;
}

std::string loss_shape(const CrossEntropyArgs& a) {
  return a.params.reduction == Reduction::kNone
             ? std::to_string(a.rows) + " elements (reduction none: one per row)"
             : std::string("one element (reduction sum or mean)");
}

std::int64_t loss_numel(const CrossEntropyArgs& a) {
  return a.params.reduction == Reduction::kNone ? a.rows : 1;
}

std::size_t workspace_size(const CrossEntropyArgs& a, Device device, bool forward) {
  return device.type == DeviceType::kCUDA
             ? cuda::cross_entropy_workspace_size(a, forward, device.index)
             : cpu::cross_entropy_workspace_size(a, forward);
}

}  // namespace

namespace detail {

void set_loss_outputs(const char* op, const CrossEntropyOutputs& out, Device device,
                      CrossEntropyArgs& a) {
  const std::int64_t n = loss_numel(a);
  const std::string shape = loss_shape(a);
  a.loss = float_buffer(op, "loss", out.loss, device, n, shape);
  if (out.z_loss.defined()) a.z_loss = float_buffer(op, "z_loss", out.z_loss, device, n, shape);
  if (out.accuracy.defined()) {
    a.accuracy = float_buffer(op, "accuracy", out.accuracy, device, n, shape);
  }
  if (out.predicted.defined()) {
    check_device(op, "predicted", out.predicted, device, "the logits' device");
    check_dtype(op, "predicted", out.predicted.dtype, DType::kInt64);
    const std::int64_t got = contiguous_numel(op, "predicted", out.predicted);
    TIGON_CHECK_ARG(got == a.rows, op, "predicted",
                    std::to_string(a.rows) + " elements (one per row)",
                    shape_string(out.predicted));
    a.predicted = static_cast<std::int64_t*>(out.predicted.data);
  }
}

}  // namespace detail

const char* reduction_name(Reduction reduction) noexcept {
  switch (reduction) {
    case Reduction::kNone: return "none";
    case Reduction::kSum: return "sum";
    case Reduction::kMean: return "mean";
    case Reduction::kBatchMean: return "batchmean";
  }
  return "unknown";
}

std::size_t cross_entropy_fwd_workspace_size(const CrossEntropyParams& params,
                                             const CrossEntropyInputs& inputs) {
  const CrossEntropyArgs a = checked_inputs("cross_entropy_fwd_workspace_size", params, inputs);
  return workspace_size(a, inputs.logits.device, true);
}

std::size_t cross_entropy_bwd_workspace_size(const CrossEntropyParams& params,
                                             const CrossEntropyInputs& inputs) {
  const CrossEntropyArgs a = checked_inputs("cross_entropy_bwd_workspace_size", params, inputs);
  return workspace_size(a, inputs.logits.device, false);
}

void cross_entropy_fwd(const CrossEntropyParams& params, const CrossEntropyInputs& inputs,
                       const CrossEntropyOutputs& outputs, const TensorView& lse,
                       const TensorView& grad_logits, Workspace workspace, Stream stream) {
  constexpr const char* op = "cross_entropy_fwd";
  CrossEntropyArgs a = checked_inputs(op, params, inputs);
  const Device device = inputs.logits.device;
  detail::set_loss_outputs(op, outputs, device, a);
  if (lse.defined()) {
    a.lse = float_buffer(op, "lse", lse, device, a.rows,
                         std::to_string(a.rows) + " elements (one per row)");
  }
  if (grad_logits.defined()) check_grad(op, inputs, a, grad_logits);
  const std::size_t needed = workspace_size(a, device, true);
  detail::check_workspace(op, workspace, needed, "cross_entropy_fwd_workspace_size");
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (device.type == DeviceType::kCUDA) {
    cuda::cross_entropy_fwd(a, device.index, stream.cuda_stream);
  } else {
    cpu::cross_entropy_fwd(a);
  }
}

void cross_entropy_bwd(const CrossEntropyParams& params, const CrossEntropyInputs& inputs,
                       const TensorView& lse, const TensorView& grad_loss,
                       const TensorView& grad_logits, Workspace workspace, Stream stream) {
  constexpr const char* op = "cross_entropy_bwd";
  CrossEntropyArgs a = checked_inputs(op, params, inputs);
  const Device device = inputs.logits.device;
  a.lse = float_buffer(op, "lse", lse, device, a.rows,
                       std::to_string(a.rows) + " elements (one per row, from the forward)");
  a.grad_loss = float_buffer(op, "grad_loss", grad_loss, device, loss_numel(a), loss_shape(a));
  TIGON_CHECK_ARG(grad_logits.defined(), op, "grad_logits", "a tensor", "none");
  check_grad(op, inputs, a, grad_logits);
  const std::size_t needed = workspace_size(a, device, false);
  detail::check_workspace(op, workspace, needed, "cross_entropy_bwd_workspace_size");
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (a.rows == 0) return;
  if (device.type == DeviceType::kCUDA) {
    cuda::cross_entropy_bwd(a, device.index, stream.cuda_stream);
  } else {
    cpu::cross_entropy_bwd(a);
  }
}

void cross_entropy_scale_grad(const TensorView& grad_logits, const TensorView& grad_loss,
                              Stream stream) {
  constexpr const char* op = "cross_entropy_scale_grad";
  TIGON_CHECK_ARG(is_floating(grad_logits.dtype), op, "grad_logits",
                  "dtype float32, float16 or bfloat16", dtype_name(grad_logits.dtype),
                  ErrorCode::kTypeError);
  const detail::RowLayout l = detail::row_layout(op, "grad_logits", grad_logits);
  const Device device = grad_logits.device;
  detail::check_backend(op, "grad_logits", device);
  detail::ScaleGradArgs a;
  a.scale = float_buffer(op, "grad_loss", grad_loss, device, 1, "one element");
  a.grad = grad_logits.data;
  a.rows = l.rows;
  a.vocab = l.hidden;
  a.row_stride = l.row_stride;
  a.dtype = grad_logits.dtype;
  if (a.rows == 0 || a.vocab == 0) return;
  if (device.type == DeviceType::kCUDA) {
    cuda::cross_entropy_scale_grad(a, device.index, stream.cuda_stream);
  } else {
    cpu::cross_entropy_scale_grad(a);
  }
}

}  // namespace tigon
