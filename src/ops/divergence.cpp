// kl_div, jsd, tvd: the one validation point, then dispatch to a backend.
#include "tigon/ops/divergence.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "ops/divergence_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::check_dtype;
using detail::DivergenceArgs;
using math::DivergenceKind;

// What each public entry point contributes: its kind and options, checked, as DivergenceArgs.
DivergenceArgs args_of(const char* op, const KlDivParams& p) {
  const int r = static_cast<int>(p.reduction);
  TIGON_CHECK_ARG(r >= 0 && r <= 3, op, "reduction", "kNone, kSum, kMean or kBatchMean",
                  std::to_string(r));
  DivergenceArgs a;
  a.kind = DivergenceKind::kKlDiv;
  a.reduction = p.reduction;
  a.options.log_target = p.log_target;
  return a;
}

DivergenceArgs args_of(const char* op, const JsdParams& p) {
  TIGON_CHECK_ARG(p.beta >= 0.0f && p.beta <= 1.0f, op, "beta", "a value in [0, 1]",
                  std::to_string(p.beta));
  DivergenceArgs a;
  a.kind = DivergenceKind::kJsd;
  a.reduction = Reduction::kBatchMean;
  a.options.beta = p.beta;
  a.ignore_index = p.ignore_index;
  return a;
}

DivergenceArgs args_of(const char* op, const TvdParams& p) {
  const int r = static_cast<int>(p.reduction);
  TIGON_CHECK_ARG(r >= 0 && r <= 3, op, "reduction", "kNone, kSum, kMean or kBatchMean",
                  std::to_string(r));
  DivergenceArgs a;
  a.kind = DivergenceKind::kTvd;
  a.reduction = p.reduction;
  a.ignore_index = p.ignore_index;
  return a;
}

void check_same_shape(const char* op, const char* arg, const TensorView& t,
                      const TensorView& input) {
  bool same = t.ndim == input.ndim;
  for (int d = 0; same && d < t.ndim; ++d) same = t.sizes[d] == input.sizes[d];
  TIGON_CHECK_ARG(same, op, arg, "shape " + detail::shape_string(input) + " (input's shape)",
                  detail::shape_string(t));
}

// A tensor of input's shape on input's device, in input's dtype (or float32 when
// `float32_allowed`); its row stride.
std::int64_t checked_like_input(const char* op, const char* arg, const TensorView& t,
                                const TensorView& input, bool float32_allowed) {
  detail::check_device(op, arg, t, input.device, "input's device");
  if (float32_allowed && t.dtype != input.dtype) {
    TIGON_CHECK_ARG(t.dtype == DType::kFloat32, op, arg,
                    std::string("dtype float32 or ") + dtype_name(input.dtype) + " (input's)",
                    dtype_name(t.dtype), ErrorCode::kTypeError);
  } else if (!float32_allowed) {
    check_dtype(op, arg, t.dtype, input.dtype, " (input's dtype)");
  }
  check_same_shape(op, arg, t, input);
  return detail::row_layout(op, arg, t).row_stride;
}

// input, target and labels; fills everything but the outputs, upstream gradient and workspace.
void check_inputs(const char* op, const DivergenceInputs& in, DivergenceArgs& a) {
  detail::check_floating(op, "input", in.input.dtype);
  const detail::RowLayout l = detail::row_layout(op, "input", in.input);
  TIGON_CHECK_ARG(l.hidden > 0 || l.rows == 0, op, "input", "a last dimension (vocabulary) >= 1",
                  detail::shape_string(in.input));
  detail::check_backend(op, "input", in.input.device);
  a.rows = l.rows;
  a.vocab = l.hidden;
  a.first_dim = in.input.sizes[0];
  a.dtype = in.input.dtype;
  a.input = in.input.data;
  a.input_row_stride = l.row_stride;
  a.target = in.target.data;
  a.target_row_stride = checked_like_input(op, "target", in.target, in.input, false);
  if (!in.labels.defined()) return;
  TIGON_CHECK_ARG(a.kind != DivergenceKind::kKlDiv, op, "labels",
                  "no labels (kl_div ignores no rows)", detail::shape_string(in.labels));
  detail::check_device(op, "labels", in.labels, in.input.device, "input's device");
  check_dtype(op, "labels", in.labels.dtype, DType::kInt64);
  const std::int64_t n = detail::contiguous_numel(op, "labels", in.labels);
  TIGON_CHECK_ARG(n == a.rows, op, "labels",
                  std::to_string(a.rows) + " elements (one per row of input)",
                  detail::shape_string(in.labels));
  a.labels = static_cast<const std::int64_t*>(in.labels.data);
}

// The loss (forward) or its upstream gradient (backward): one float32 element, or for kNone a
// tensor of input's shape in float32 or input's dtype. Returns its row stride.
std::int64_t check_loss_like(const char* op, const char* arg, const TensorView& t,
                             const TensorView& input, const DivergenceArgs& a) {
  if (a.reduction == Reduction::kNone) return checked_like_input(op, arg, t, input, true);
  detail::check_device(op, arg, t, input.device, "input's device");
  check_dtype(op, arg, t.dtype, DType::kFloat32);
  const std::int64_t n = detail::contiguous_numel(op, arg, t);
  TIGON_CHECK_ARG(n == 1, op, arg,
                  std::string("one element (reduction ") + reduction_name(a.reduction) + ")",
                  detail::shape_string(t));
  return 0;
}

void check_grad(const char* op, const TensorView& grad, const DivergenceInputs& in,
                DivergenceArgs& a) {
  a.grad_row_stride = checked_like_input(op, "grad_input", grad, in.input, false);
  if (grad.data == in.input.data && a.rows > 1) {
    TIGON_CHECK_ARG(a.grad_row_stride == a.input_row_stride, op, "grad_input",
                    "input's row stride when written into input",
                    std::to_string(a.grad_row_stride));
  }
  a.grad = grad.data;
}

std::size_t workspace_size(const DivergenceArgs& a, Device device) {
  return device.type == DeviceType::kCUDA ? cuda::divergence_workspace_size(a, device.index)
                                          : cpu::divergence_workspace_size(a);
}

void set_workspace(const char* op, const char* query, Workspace ws, Device device,
                   DivergenceArgs& a) {
  detail::check_workspace(op, ws, workspace_size(a, device), query);
  a.workspace = static_cast<float*>(ws.data);
  a.workspace_bytes = ws.bytes;
}

template <typename Params>
std::size_t checked_workspace_size(const char* op, const Params& params,
                                   const DivergenceInputs& inputs) {
  DivergenceArgs a = args_of(op, params);
  check_inputs(op, inputs, a);
  return workspace_size(a, inputs.input.device);
}

template <typename Params>
void forward(const char* op, const char* query, const Params& params, const DivergenceInputs& in,
             const TensorView& loss, const TensorView& grad, Workspace ws, Stream stream) {
  DivergenceArgs a = args_of(op, params);
  check_inputs(op, in, a);
  a.loss_row_stride = check_loss_like(op, "loss", loss, in.input, a);
  a.loss = loss.data;
  a.loss_dtype = loss.dtype;
  if (grad.defined()) check_grad(op, grad, in, a);
  const Device device = in.input.device;
  set_workspace(op, query, ws, device, a);
  if (device.type == DeviceType::kCUDA) {
    cuda::divergence_fwd(a, device.index, stream.cuda_stream);
  } else {
    cpu::divergence_fwd(a);
  }
}

template <typename Params>
void backward(const char* op, const char* query, const Params& params, const DivergenceInputs& in,
              const TensorView& grad_loss, const TensorView& grad, Workspace ws, Stream stream) {
  DivergenceArgs a = args_of(op, params);
  check_inputs(op, in, a);
  a.grad_loss_row_stride = check_loss_like(op, "grad_loss", grad_loss, in.input, a);
  a.grad_loss = grad_loss.data;
  a.grad_loss_dtype = grad_loss.dtype;
  TIGON_CHECK_ARG(grad.defined(), op, "grad_input", "a tensor", "none");
  check_grad(op, grad, in, a);
  const Device device = in.input.device;
  set_workspace(op, query, ws, device, a);
  if (a.rows == 0) return;
  if (device.type == DeviceType::kCUDA) {
    cuda::divergence_bwd(a, device.index, stream.cuda_stream);
  } else {
    cpu::divergence_bwd(a);
  }
}

}  // namespace

std::size_t kl_div_workspace_size(const KlDivParams& params, const DivergenceInputs& inputs) {
  return checked_workspace_size("kl_div_workspace_size", params, inputs);
}
std::size_t jsd_workspace_size(const JsdParams& params, const DivergenceInputs& inputs) {
  return checked_workspace_size("jsd_workspace_size", params, inputs);
}
std::size_t tvd_workspace_size(const TvdParams& params, const DivergenceInputs& inputs) {
  return checked_workspace_size("tvd_workspace_size", params, inputs);
}

void kl_div_fwd(const KlDivParams& params, const DivergenceInputs& inputs, const TensorView& loss,
                const TensorView& grad_input, Workspace workspace, Stream stream) {
  forward("kl_div_fwd", "kl_div_workspace_size", params, inputs, loss, grad_input, workspace,
          stream);
}
void jsd_fwd(const JsdParams& params, const DivergenceInputs& inputs, const TensorView& loss,
             const TensorView& grad_input, Workspace workspace, Stream stream) {
  forward("jsd_fwd", "jsd_workspace_size", params, inputs, loss, grad_input, workspace, stream);
}
void tvd_fwd(const TvdParams& params, const DivergenceInputs& inputs, const TensorView& loss,
             const TensorView& grad_input, Workspace workspace, Stream stream) {
  forward("tvd_fwd", "tvd_workspace_size", params, inputs, loss, grad_input, workspace, stream);
}

void kl_div_bwd(const KlDivParams& params, const DivergenceInputs& inputs,
                const TensorView& grad_loss, const TensorView& grad_input, Workspace workspace,
                Stream stream) {
  backward("kl_div_bwd", "kl_div_workspace_size", params, inputs, grad_loss, grad_input, workspace,
           stream);
}
void jsd_bwd(const JsdParams& params, const DivergenceInputs& inputs, const TensorView& grad_loss,
             const TensorView& grad_input, Workspace workspace, Stream stream) {
  backward("jsd_bwd", "jsd_workspace_size", params, inputs, grad_loss, grad_input, workspace,
           stream);
}
void tvd_bwd(const TvdParams& params, const DivergenceInputs& inputs, const TensorView& grad_loss,
             const TensorView& grad_input, Workspace workspace, Stream stream) {
  backward("tvd_bwd", "tvd_workspace_size", params, inputs, grad_loss, grad_input, workspace,
           stream);
}

}  // namespace tigon
