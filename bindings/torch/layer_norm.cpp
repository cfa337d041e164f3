// LayerNorm operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/layer_norm.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "layer_norm_fwd";
constexpr const char* kBwd = "layer_norm_bwd";
constexpr const char* kBwdInplace = "layer_norm_bwd_inplace";

LayerNormParams make_params(double eps) {
  LayerNormParams params;
  params.eps = static_cast<float>(eps);  // PyTorch also computes with a float32 eps
  return params;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd(
    const at::Tensor& x_arg, const std::optional<at::Tensor>& weight_arg,
    const std::optional<at::Tensor>& bias_arg, double eps, bool /*in_place*/) {
  const CudaContext context(x_arg);
  const LayerNormParams params = make_params(eps);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const std::optional<at::Tensor> bias = contiguous_parameter(bias_arg);
    const TensorView xv = to_view(x, kFwd, "x");
    at::Tensor y = at::empty(x.sizes(), x.options());
    at::Tensor mean = empty_row_statistic(x);
    at::Tensor rstd = empty_row_statistic(x);
    const at::Tensor workspace =
        at::empty({static_cast<int64_t>(layer_norm_fwd_workspace_size(params, xv))},
                  x.options().dtype(at::kByte));
    tigon::layer_norm_fwd(params, xv, to_view(weight, kFwd, "weight"), to_view(bias, kFwd, "bias"),
                          to_view(y, kFwd, "y"), to_view(flat(mean), kFwd, "mean"),
                          to_view(flat(rstd), kFwd, "rstd"), to_workspace(workspace),
                          context.stream);
    return std::make_tuple(std::move(y), std::move(mean), std::move(rstd));
  });
}

// tigon::layer_norm_bwd writing dx into `dx` (dy itself for the in-place op); returns (dw, db).
// bias is read for its dtype only (db's); without it no db is computed and db is empty.
std::tuple<at::Tensor, at::Tensor> run_backward(const char* op, const at::Tensor& dy,
                                                const at::Tensor& x_arg,
                                                const std::optional<at::Tensor>& weight_arg,
                                                const std::optional<at::Tensor>& bias,
                                                const at::Tensor& mean, const at::Tensor& rstd,
                                                const at::Tensor& dx, Stream stream) {
  const LayerNormParams params;  // eps is not needed: rstd carries it
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const bool wants_db = bias.has_value() && bias->defined();
    const TensorView xv = to_view(x, op, "x");
    at::Tensor dw = empty_parameter_grad(weight, x);
    at::Tensor db = empty_parameter_grad(wants_db ? bias : std::nullopt, x);
    const at::Tensor workspace = at::empty({static_cast<int64_t>(layer_norm_bwd_workspace_size(
                                               params, xv, weight.has_value(), wants_db))},
                                           x.options().dtype(at::kByte));
    tigon::layer_norm_bwd(params, to_view(dy, op, "dy"), xv, to_view(weight, op, "weight"),
                          to_view(flat(mean), op, "mean"), to_view(flat(rstd), op, "rstd"),
                          to_view(dx, op, "dx"), weight ? to_view(dw, op, "dw") : TensorView{},
                          wants_db ? to_view(db, op, "db") : TensorView{}, to_workspace(workspace),
                          stream);
    return std::make_tuple(std::move(dw), std::move(db));
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd(
    const at::Tensor& dy, const at::Tensor& x, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& rstd) {
  const CudaContext context(x);
  at::Tensor dx = at::empty(x.sizes(), x.options());
  auto [dw, db] =
      run_backward(kBwd, with_row_layout(dy), x, weight, bias, mean, rstd, dx, context.stream);
  return std::make_tuple(std::move(dx), std::move(dw), std::move(db));
}

// dx is written into dy, which needs a layout the core can address without a copy (its dtype,
// x's, the core checks).
std::tuple<at::Tensor, at::Tensor> layer_norm_bwd_inplace(const at::Tensor& dy, const at::Tensor& x,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias,
                                                          const at::Tensor& mean,
                                                          const at::Tensor& rstd) {
  const CudaContext context(x);
  check_in_place_rows(kBwdInplace, "dy", dy);
  return run_backward(kBwdInplace, dy, x, weight, bias, mean, rstd, dy, context.stream);
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &layer_norm_fwd);
  m.impl(kBwd, &layer_norm_bwd);
  m.impl(kBwdInplace, &layer_norm_bwd_inplace);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // layer_norm_autograd.cpp.
  m.set_python_module("tigon.ops.layer_norm");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "layer_norm_fwd(Tensor x, Tensor? weight, Tensor? bias, float eps, bool in_place=False) "
      "-> (Tensor y, Tensor mean, Tensor rstd)",
      tags);
  m.def(
      "layer_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, "
      "Tensor rstd) -> (Tensor dx, Tensor dw, Tensor db)",
      tags);
  m.def(
      "layer_norm_bwd_inplace(Tensor(a!) dy, Tensor x, Tensor? weight, Tensor? bias, Tensor mean, "
      "Tensor rstd) -> (Tensor dw, Tensor db)",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("layer_norm_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
