// kl_div / jsd / tvd operators: schemas and kernels (one per op for every device,
// cuda_context.h). Each forward returns (loss, grad): grad is the gradient for upstream 1 when
// compute_grad (an empty [0] tensor otherwise); each backward recomputes the gradient for any
// upstream gradient. Loss dtypes: float32 one element, or with reduction "none" a tensor of
// input's shape in input's dtype for kl_div (torch's F.kl_div) and float32 for tvd (the peer's).
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <string_view>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "tigon/ops/divergence.h"

namespace tigon::torch_binding {
namespace {

// Owns the (possibly copied) tensors the views point into.
struct Inputs {
  at::Tensor input, target;
  std::optional<at::Tensor> labels;
  DivergenceInputs views;
};

Inputs make_inputs(const at::Tensor& input, const at::Tensor& target,
                   const std::optional<at::Tensor>& labels, const char* op) {
  Inputs in;
  in.input = with_row_layout(input);
  in.target = with_row_layout(target);
  if (labels && labels->defined()) in.labels = labels->contiguous();
  in.views.input = to_view(in.input, op, "input");
  in.views.target = to_view(in.target, op, "target");
  if (in.labels) {
    TORCH_CHECK_TYPE(
        in.labels->scalar_type() == at::kLong,
        argument_message(op, "labels", "dtype int64", c10::toString(in.labels->scalar_type())));
    const Device device =
        in.labels->is_cuda() ? Device::cuda(in.labels->get_device()) : Device::cpu();
    in.views.labels =
        TensorView::contiguous(in.labels->data_ptr(), DType::kInt64, {in.labels->numel()}, device);
  }
  return in;
}

Workspace workspace_of(const at::Tensor& t) {
  return Workspace{t.numel() ? t.data_ptr() : nullptr, static_cast<std::size_t>(t.numel())};
}

// The loss tensor of a forward: float32 [], or for kNone input's shape in `none_dtype`.
at::Tensor loss_tensor(Reduction reduction, const at::Tensor& input, at::ScalarType none_dtype) {
  if (reduction == Reduction::kNone)
    return at::empty(input.sizes(), input.options().dtype(none_dtype));
  return at::empty({}, input.options().dtype(at::kFloat));
}

// The upstream gradient as the core takes it: one float32 element, or for kNone input's shape
// in float32 or input's dtype (kept as it comes when it is one of them).
at::Tensor upstream_tensor(Reduction reduction, const at::Tensor& grad_loss,
                           const at::Tensor& input) {
  if (reduction != Reduction::kNone) return grad_loss.to(at::kFloat).reshape({1}).contiguous();
  const bool keep =
      grad_loss.scalar_type() == at::kFloat || grad_loss.scalar_type() == input.scalar_type();
  return with_row_layout(keep ? grad_loss : grad_loss.to(at::kFloat));
}

// Runs one forward: fwd(views, loss, grad, workspace) after workspace_size(views).
template <typename Size, typename Fwd>
std::tuple<at::Tensor, at::Tensor> forward(const char* op, const at::Tensor& input,
                                           const at::Tensor& target,
                                           const std::optional<at::Tensor>& labels,
                                           Reduction reduction, at::ScalarType none_dtype,
                                           bool compute_grad, Size&& size, Fwd&& fwd) {
  return translate_errors([&] {
    const Inputs in = make_inputs(input, target, labels, op);
    at::Tensor loss = loss_tensor(reduction, in.input, none_dtype);
    at::Tensor grad =
        at::empty(compute_grad ? in.input.sizes() : at::IntArrayRef{0}, in.input.options());
    const at::Tensor ws =
        at::empty({static_cast<int64_t>(size(in.views))}, in.input.options().dtype(at::kByte));
    const TensorView loss_view = to_view(loss.dim() ? loss : loss.view({1}), op, "loss");
    fwd(in.views, loss_view, compute_grad ? to_view(grad, op, "grad_input") : TensorView{},
        workspace_of(ws));
    return std::make_tuple(std::move(loss), std::move(grad));
  });
}

template <typename Size, typename Bwd>
at::Tensor backward(const char* op, const at::Tensor& grad_loss, const at::Tensor& input,
                    const at::Tensor& target, const std::optional<at::Tensor>& labels,
                    Reduction reduction, Size&& size, Bwd&& bwd) {
  return translate_errors([&] {
    const Inputs in = make_inputs(input, target, labels, op);
    const at::Tensor up = upstream_tensor(reduction, grad_loss, in.input);
    at::Tensor grad = at::empty(in.input.sizes(), in.input.options());
    const at::Tensor ws =
        at::empty({static_cast<int64_t>(size(in.views))}, in.input.options().dtype(at::kByte));
    bwd(in.views, to_view(up, op, "grad_loss"), to_view(grad, op, "grad_input"), workspace_of(ws));
    return grad;
  });
}

KlDivParams kl_div_params(std::string_view reduction, bool log_target, const char* op) {
  return {parse_reduction(reduction, op, /*batchmean=*/true), log_target};
}

TvdParams tvd_params(std::string_view reduction, int64_t ignore_index, const char* op) {
  return {parse_reduction(reduction, op, /*batchmean=*/true), ignore_index};
}

std::tuple<at::Tensor, at::Tensor> kl_div_fwd(const at::Tensor& input, const at::Tensor& target,
                                              std::string_view reduction, bool log_target,
                                              bool compute_grad) {
  constexpr const char* op = "kl_div_fwd";
  const CudaContext context(input);
  const KlDivParams p = kl_div_params(reduction, log_target, op);
  return forward(
      op, input, target, std::nullopt, p.reduction, input.scalar_type(), compute_grad,
      [&](const DivergenceInputs& v) { return kl_div_workspace_size(p, v); },
      [&](const DivergenceInputs& v, const TensorView& loss, const TensorView& grad, Workspace ws) {
        tigon::kl_div_fwd(p, v, loss, grad, ws, context.stream);
      });
}

at::Tensor kl_div_bwd(const at::Tensor& grad_loss, const at::Tensor& input,
                      const at::Tensor& target, std::string_view reduction, bool log_target) {
  constexpr const char* op = "kl_div_bwd";
  const CudaContext context(input);
  const KlDivParams p = kl_div_params(reduction, log_target, op);
  return backward(
      op, grad_loss, input, target, std::nullopt, p.reduction,
      [&](const DivergenceInputs& v) { return kl_div_workspace_size(p, v); },
      [&](const DivergenceInputs& v, const TensorView& up, const TensorView& grad, Workspace ws) {
        tigon::kl_div_bwd(p, v, up, grad, ws, context.stream);
      });
}

std::tuple<at::Tensor, at::Tensor> jsd_fwd(const at::Tensor& input, const at::Tensor& target,
                                           const std::optional<at::Tensor>& labels, double beta,
                                           int64_t ignore_index, bool compute_grad) {
  constexpr const char* op = "jsd_fwd";
  const CudaContext context(input);
  const JsdParams p{static_cast<float>(beta), ignore_index};
  return forward(
      op, input, target, labels, Reduction::kBatchMean, at::kFloat, compute_grad,
      [&](const DivergenceInputs& v) { return jsd_workspace_size(p, v); },
      [&](const DivergenceInputs& v, const TensorView& loss, const TensorView& grad, Workspace ws) {
        tigon::jsd_fwd(p, v, loss, grad, ws, context.stream);
      });
}

at::Tensor jsd_bwd(const at::Tensor& grad_loss, const at::Tensor& input, const at::Tensor& target,
                   const std::optional<at::Tensor>& labels, double beta, int64_t ignore_index) {
  constexpr const char* op = "jsd_bwd";
  const CudaContext context(input);
  const JsdParams p{static_cast<float>(beta), ignore_index};
  return backward(
      op, grad_loss, input, target, labels, Reduction::kBatchMean,
      [&](const DivergenceInputs& v) { return jsd_workspace_size(p, v); },
      [&](const DivergenceInputs& v, const TensorView& up, const TensorView& grad, Workspace ws) {
        tigon::jsd_bwd(p, v, up, grad, ws, context.stream);
      });
}

std::tuple<at::Tensor, at::Tensor> tvd_fwd(const at::Tensor& input, const at::Tensor& target,
                                           const std::optional<at::Tensor>& labels,
                                           std::string_view reduction, int64_t ignore_index,
                                           bool compute_grad) {
  constexpr const char* op = "tvd_fwd";
  const CudaContext context(input);
  const TvdParams p = tvd_params(reduction, ignore_index, op);
  return forward(
      op, input, target, labels, p.reduction, at::kFloat, compute_grad,
      [&](const DivergenceInputs& v) { return tvd_workspace_size(p, v); },
      [&](const DivergenceInputs& v, const TensorView& loss, const TensorView& grad, Workspace ws) {
        tigon::tvd_fwd(p, v, loss, grad, ws, context.stream);
      });
}

at::Tensor tvd_bwd(const at::Tensor& grad_loss, const at::Tensor& input, const at::Tensor& target,
                   const std::optional<at::Tensor>& labels, std::string_view reduction,
                   int64_t ignore_index) {
  constexpr const char* op = "tvd_bwd";
  const CudaContext context(input);
  const TvdParams p = tvd_params(reduction, ignore_index, op);
  return backward(
      op, grad_loss, input, target, labels, p.reduction,
      [&](const DivergenceInputs& v) { return tvd_workspace_size(p, v); },
      [&](const DivergenceInputs& v, const TensorView& up, const TensorView& grad, Workspace ws) {
        tigon::tvd_bwd(p, v, up, grad, ws, context.stream);
      });
}

void register_kernels(torch::Library& m) {
  m.impl("kl_div_fwd", &kl_div_fwd);
  m.impl("kl_div_bwd", &kl_div_bwd);
  m.impl("jsd_fwd", &jsd_fwd);
  m.impl("jsd_bwd", &jsd_bwd);
  m.impl("tvd_fwd", &tvd_fwd);
  m.impl("tvd_bwd", &tvd_bwd);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  m.set_python_module("tigon.ops.divergence");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "kl_div_fwd(Tensor input, Tensor target, str reduction, bool log_target, "
      "bool compute_grad) -> (Tensor loss, Tensor grad)",
      tags);
  m.def(
      "kl_div_bwd(Tensor grad_loss, Tensor input, Tensor target, str reduction, "
      "bool log_target) -> Tensor",
      tags);
  m.def(
      "jsd_fwd(Tensor input, Tensor target, Tensor? labels, float beta, int ignore_index, "
      "bool compute_grad) -> (Tensor loss, Tensor grad)",
      tags);
  m.def(
      "jsd_bwd(Tensor grad_loss, Tensor input, Tensor target, Tensor? labels, float beta, "
      "int ignore_index) -> Tensor",
      tags);
  m.def(
      "tvd_fwd(Tensor input, Tensor target, Tensor? labels, str reduction, int ignore_index, "
      "bool compute_grad) -> (Tensor loss, Tensor grad)",
      tags);
  m.def(
      "tvd_bwd(Tensor grad_loss, Tensor input, Tensor target, Tensor? labels, str reduction, "
      "int ignore_index) -> Tensor",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
