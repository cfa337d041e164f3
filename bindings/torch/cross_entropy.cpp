// Cross-entropy operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "tigon/ops/cross_entropy.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

// Owns the (possibly copied) tensors the views point into.
struct Inputs {
  at::Tensor logits, target;
  std::optional<at::Tensor> weight, divisor;
  CrossEntropyInputs views;
};

Inputs make_inputs(const at::Tensor& logits, const at::Tensor& target,
                   const std::optional<at::Tensor>& weight,
                   const std::optional<at::Tensor>& divisor, bool logits_as_is, const char* op) {
  Inputs in;
  in.logits = logits_as_is ? logits : with_row_layout(logits);
  in.target = target.contiguous();
  if (weight && weight->defined()) in.weight = weight->contiguous();
  // The divisor (e.g. HF's num_items_in_batch) becomes one float32 element on the logits'
  // device; a device-to-device cast, never a host synchronization.
  if (divisor && divisor->defined()) {
    in.divisor = divisor->to(logits.device(), at::kFloat).reshape({1}).contiguous();
  }
  in.views.logits = to_view(in.logits, op, "logits");
  in.views.target = to_view(in.target, op, "target");
  in.views.weight = to_view(in.weight, op, "weight");
  in.views.divisor = to_view(in.divisor, op, "divisor");
  return in;
}

at::Tensor workspace_tensor(std::size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

Workspace to_workspace(const at::Tensor& t) {
  return Workspace{t.numel() ? t.data_ptr() : nullptr, static_cast<std::size_t>(t.numel())};
}

at::Tensor loss_tensor(const CrossEntropyParams& p, const at::Tensor& logits) {
  const auto options = logits.options().dtype(at::kFloat);
  if (p.reduction == Reduction::kNone) {
    return at::empty({logits.numel() == 0 ? 0 : logits.numel() / logits.size(-1)}, options);
  }
  return at::empty({}, options);
}

// A [N] view of a loss tensor for the core ([] -> [1]).
TensorView flat(const at::Tensor& t, const char* op, const char* arg) {
  return to_view(t.view({-1}), op, arg);
}

// What a forward returns besides the loss.
struct Requested {
  bool grad = false;
  bool predicted = false;
  bool accuracy = false;
};

using ForwardOutputs =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// (loss, z_loss, lse, grad, predicted, accuracy): grad is the fused gradient for upstream 1 when
// requested and not in_place, else an empty [0] tensor (with in_place it is written over the
// logits); predicted and accuracy are empty [0] tensors unless requested.
ForwardOutputs forward(const char* op, const CrossEntropyParams& params, const at::Tensor& logits,
                       const at::Tensor& target, const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& divisor, Requested requested, bool in_place,
                       Stream stream) {
  if (in_place) {
    TORCH_CHECK_VALUE(has_row_layout(logits),
                      argument_message(op, "logits",
                                       "unit stride in the last dimension and one row stride "
                                       "(the gradient is written into the logits)",
                                       "strides " + int_list(logits.strides())));
  }
  return translate_errors([&] {
    const Inputs in = make_inputs(logits, target, weight, divisor, in_place, op);
    at::Tensor loss = loss_tensor(params, in.logits);
    at::Tensor z_loss = at::empty_like(loss);
    const int64_t rows = in.target.numel();
    at::Tensor lse = at::empty({rows}, in.logits.options().dtype(at::kFloat));
    const bool grad_buffer = requested.grad && !in_place;
    at::Tensor grad =
        at::empty(grad_buffer ? in.logits.sizes() : at::IntArrayRef{0}, in.logits.options());
    TensorView grad_view{};
    if (in_place) {
      grad_view = in.views.logits;
    } else if (requested.grad) {
      grad_view = to_view(grad, op, "grad_logits");
    }
    CrossEntropyOutputs out{flat(loss, op, "loss"), flat(z_loss, op, "z_loss")};
    at::Tensor predicted =
        at::empty({requested.predicted ? rows : 0}, lse.options().dtype(at::kLong));
    at::Tensor accuracy =
        requested.accuracy ? at::empty_like(loss) : at::empty({0}, loss.options());
    if (requested.predicted) out.predicted = to_view(predicted, op, "predicted");
    if (requested.accuracy) out.accuracy = flat(accuracy, op, "accuracy");
    const at::Tensor ws =
        workspace_tensor(cross_entropy_fwd_workspace_size(params, in.views), in.logits);
    tigon::cross_entropy_fwd(params, in.views, out, to_view(lse, op, "lse"), grad_view,
                             to_workspace(ws), stream);
    return std::make_tuple(std::move(loss), std::move(z_loss), std::move(lse), std::move(grad),
                           std::move(predicted), std::move(accuracy));
  });
}

ForwardOutputs cross_entropy_fwd(const at::Tensor& logits, const at::Tensor& target,
                                 const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& divisor, int64_t ignore_index,
                                 std::string_view reduction, double label_smoothing,
                                 double lse_square_scale, double softcap, bool compute_grad,
                                 bool compute_predicted, bool compute_accuracy) {
  constexpr const char* op = "cross_entropy_fwd";
  const CudaContext context(logits);
  const CrossEntropyParams params =
      cross_entropy_params(ignore_index, reduction, label_smoothing, lse_square_scale, softcap, op);
  return forward(op, params, logits, target, weight, divisor,
                 {compute_grad, compute_predicted, compute_accuracy}, false, context.stream);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> cross_entropy_fwd_inplace(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& divisor, int64_t ignore_index, std::string_view reduction,
    double label_smoothing, double lse_square_scale, double softcap, bool compute_predicted,
    bool compute_accuracy) {
  constexpr const char* op = "cross_entropy_fwd_inplace";
  const CudaContext context(logits);
  const CrossEntropyParams params =
      cross_entropy_params(ignore_index, reduction, label_smoothing, lse_square_scale, softcap, op);
  auto [loss, z_loss, lse, unused, predicted, accuracy] =
      forward(op, params, logits, target, weight, divisor,
              {true, compute_predicted, compute_accuracy}, true, context.stream);
  return std::make_tuple(std::move(loss), std::move(z_loss), std::move(lse), std::move(predicted),
                         std::move(accuracy));
}

at::Tensor cross_entropy_bwd(const at::Tensor& grad_loss, const at::Tensor& logits,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& divisor, const at::Tensor& lse,
                             int64_t ignore_index, std::string_view reduction,
                             double label_smoothing, double lse_square_scale, double softcap) {
  constexpr const char* op = "cross_entropy_bwd";
  const CudaContext context(logits);
  const CrossEntropyParams params =
      cross_entropy_params(ignore_index, reduction, label_smoothing, lse_square_scale, softcap, op);
  return translate_errors([&] {
    const Inputs in = make_inputs(logits, target, weight, divisor, false, op);
    const at::Tensor up = grad_loss.to(at::kFloat).contiguous().view({-1});
    const at::Tensor l = lse.contiguous();
    at::Tensor grad = at::empty(in.logits.sizes(), in.logits.options());
    const at::Tensor ws =
        workspace_tensor(cross_entropy_bwd_workspace_size(params, in.views), in.logits);
    tigon::cross_entropy_bwd(params, in.views, to_view(l, op, "lse"), to_view(up, op, "grad_loss"),
                             to_view(grad, op, "grad_logits"), to_workspace(ws), context.stream);
    return grad;
  });
}

// grad *= grad_loss, in place.
void cross_entropy_scale_grad_(const at::Tensor& grad, const at::Tensor& grad_loss) {
  constexpr const char* op = "cross_entropy_scale_grad_";
  const CudaContext context(grad);
  translate_errors([&] {
    const at::Tensor up = grad_loss.to(grad.device(), at::kFloat).contiguous().view({-1});
    tigon::cross_entropy_scale_grad(to_view(grad, op, "grad"), to_view(up, op, "grad_loss"),
                                    context.stream);
  });
}

// grad * grad_loss in a new (contiguous) buffer.
at::Tensor cross_entropy_scale_grad(const at::Tensor& grad, const at::Tensor& grad_loss) {
  at::Tensor out = grad.clone(at::MemoryFormat::Contiguous);
  cross_entropy_scale_grad_(out, grad_loss);
  return out;
}

void register_kernels(torch::Library& m) {
  m.impl("cross_entropy_fwd", &cross_entropy_fwd);
  m.impl("cross_entropy_fwd_inplace", &cross_entropy_fwd_inplace);
  m.impl("cross_entropy_bwd", &cross_entropy_bwd);
  m.impl("cross_entropy_scale_grad_", &cross_entropy_scale_grad_);
  m.impl("cross_entropy_scale_grad", &cross_entropy_scale_grad);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  m.set_python_module("tigon.ops.cross_entropy");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "cross_entropy_fwd(Tensor logits, Tensor target, Tensor? weight, Tensor? divisor, "
      "int ignore_index, str reduction, float label_smoothing, float lse_square_scale, "
      "float softcap, bool compute_grad, bool compute_predicted=False, "
      "bool compute_accuracy=False) -> (Tensor loss, Tensor z_loss, Tensor lse, Tensor grad, "
      "Tensor predicted, Tensor accuracy)",
      tags);
  m.def(
      "cross_entropy_fwd_inplace(Tensor(a!) logits, Tensor target, Tensor? weight, "
      "Tensor? divisor, int ignore_index, str reduction, float label_smoothing, "
      "float lse_square_scale, float softcap, bool compute_predicted=False, "
      "bool compute_accuracy=False) -> (Tensor loss, Tensor z_loss, Tensor lse, "
      "Tensor predicted, Tensor accuracy)",
      tags);
  m.def(
      "cross_entropy_bwd(Tensor grad_loss, Tensor logits, Tensor target, Tensor? weight, "
      "Tensor? divisor, Tensor lse, int ignore_index, str reduction, float label_smoothing, "
      "float lse_square_scale, float softcap) -> Tensor",
      tags);
  m.def("cross_entropy_scale_grad_(Tensor(a!) grad, Tensor grad_loss) -> ()", tags);
  m.def("cross_entropy_scale_grad(Tensor grad, Tensor grad_loss) -> Tensor", tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("cross_entropy_fwd_inplace", tigon::torch_binding::bump_written_versions());
  m.impl("cross_entropy_scale_grad_", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
