// GroupNorm operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/group_norm.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "group_norm_fwd";
constexpr const char* kBwd = "group_norm_bwd";
constexpr const char* kBwdInplace = "group_norm_bwd_inplace";

GroupNormParams make_params(int64_t groups, double eps) {
  GroupNormParams params;
  params.groups = groups;
  params.eps = static_cast<float>(eps);  // PyTorch also computes with a float32 eps
  return params;
}

// True when each sample t[n] is contiguous (the core's layout; any stride in dimension 0).
bool has_contiguous_samples(const at::Tensor& t) {
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) return false;
    expected *= t.size(d);
  }
  return true;
}

// Other layouts (channels-last images, transposes) are copied once.
at::Tensor with_contiguous_samples(const at::Tensor& t) {
  return has_contiguous_samples(t) ? t : t.contiguous();
}

// [N, G] float32: one statistic per (sample, group).
at::Tensor empty_group_statistic(const at::Tensor& x, int64_t groups) {
  return at::empty({x.dim() > 0 ? x.size(0) : 0, groups}, x.options().dtype(at::kFloat));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_fwd(
    const at::Tensor& x_arg, const std::optional<at::Tensor>& weight_arg,
    const std::optional<at::Tensor>& bias_arg, int64_t groups, double eps) {
  const CudaContext context(x_arg);
  const GroupNormParams params = make_params(groups, eps);
  return translate_errors([&] {
    const at::Tensor x = with_contiguous_samples(x_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const std::optional<at::Tensor> bias = contiguous_parameter(bias_arg);
    const TensorView xv = to_view(x, kFwd, "x");
    at::Tensor y = at::empty(x.sizes(), x.options());
    at::Tensor mean = empty_group_statistic(x, groups);
    at::Tensor rstd = empty_group_statistic(x, groups);
    const at::Tensor workspace = empty_bytes(group_norm_fwd_workspace_size(params, xv), x);
    tigon::group_norm_fwd(params, xv, to_view(weight, kFwd, "weight"), to_view(bias, kFwd, "bias"),
                          to_view(y, kFwd, "y"), to_view(mean, kFwd, "mean"),
                          to_view(rstd, kFwd, "rstd"), to_workspace(workspace), context.stream);
    return std::make_tuple(std::move(y), std::move(mean), std::move(rstd));
  });
}

// tigon::group_norm_bwd writing dx into `dx` (dy itself for the in-place op); returns (dw, db).
// bias is read for its dtype only (db's); without it no db is computed and db is empty.
std::tuple<at::Tensor, at::Tensor> run_backward(const char* op, const at::Tensor& dy,
                                                const at::Tensor& x_arg,
                                                const std::optional<at::Tensor>& weight_arg,
                                                const std::optional<at::Tensor>& bias,
                                                const at::Tensor& mean, const at::Tensor& rstd,
                                                const at::Tensor& dx, Stream stream) {
  return translate_errors([&] {
    const GroupNormParams params = make_params(mean.dim() == 2 ? mean.size(1) : 1, 0.0);
    const at::Tensor x = with_contiguous_samples(x_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const bool wants_db = bias.has_value() && bias->defined();
    const TensorView xv = to_view(x, op, "x");
    at::Tensor dw = empty_parameter_grad(weight, x);
    at::Tensor db = empty_parameter_grad(wants_db ? bias : std::nullopt, x);
    const at::Tensor workspace = empty_bytes(group_norm_bwd_workspace_size(params, xv), x);
    tigon::group_norm_bwd(params, to_view(dy, op, "dy"), xv, to_view(weight, op, "weight"),
                          to_view(flat(mean), op, "mean"), to_view(flat(rstd), op, "rstd"),
                          to_view(dx, op, "dx"), weight ? to_view(dw, op, "dw") : TensorView{},
                          wants_db ? to_view(db, op, "db") : TensorView{}, to_workspace(workspace),
                          stream);
    return std::make_tuple(std::move(dw), std::move(db));
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_bwd(
    const at::Tensor& dy, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& rstd) {
  const CudaContext context(x);
  at::Tensor dx = at::empty(x.sizes(), x.options());
  auto [dw, db] = run_backward(kBwd, with_contiguous_samples(dy), x, weight, bias, mean, rstd, dx,
                               context.stream);
  return std::make_tuple(std::move(dx), std::move(dw), std::move(db));
}

// dx is written into dy, which needs contiguous samples (its dtype, x's, the core checks).
std::tuple<at::Tensor, at::Tensor> group_norm_bwd_inplace(const at::Tensor& dy, const at::Tensor& x,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias,
                                                          const at::Tensor& mean,
                                                          const at::Tensor& rstd) {
  const CudaContext context(x);
  TORCH_CHECK_VALUE(
      has_contiguous_samples(dy),
      argument_message(kBwdInplace, "dy", "contiguous samples (dx is written into dy)",
                       "strides " + int_list(dy.strides())));
  return run_backward(kBwdInplace, dy, x, weight, bias, mean, rstd, dy, context.stream);
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &group_norm_fwd);
  m.impl(kBwd, &group_norm_bwd);
  m.impl(kBwdInplace, &group_norm_bwd_inplace);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // group_norm_autograd.cpp.
  m.set_python_module("tigon.ops.group_norm");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "group_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, int groups, float eps) "
      "-> (Tensor y, Tensor mean, Tensor rstd)",
      tags);
  m.def(
      "group_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, "
      "Tensor rstd) -> (Tensor dx, Tensor dw, Tensor db)",
      tags);
  m.def(
      "group_norm_bwd_inplace(Tensor(a!) dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, "
      "Tensor rstd) -> (Tensor dw, Tensor db)",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("group_norm_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
