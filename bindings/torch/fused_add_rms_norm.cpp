// Fused residual add + RMSNorm operators: schemas and kernels (one per op for every device,
// cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/fused_add_rms_norm.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "fused_add_rms_norm_fwd";
constexpr const char* kBwd = "fused_add_rms_norm_bwd";
constexpr const char* kBwdInplace = "fused_add_rms_norm_bwd_inplace";

// Returns (y, h, rstd); in_place is only read by the autograd kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_add_rms_norm_fwd(
    const at::Tensor& x_arg, const at::Tensor& residual_arg,
    const std::optional<at::Tensor>& weight_arg, double eps, double offset,
    std::string_view casting_mode, bool /*in_place*/) {
  const CudaContext context(x_arg);
  const RmsNormParams params = rms_norm_params(eps, offset, casting_mode, kFwd);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const at::Tensor residual = with_row_layout(residual_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const TensorView xv = to_view(x, kFwd, "x");
    const TensorView wv = to_view(weight, kFwd, "weight");
    const DType y_dtype = rms_norm_output_dtype(params, xv.dtype, wv.dtype, wv.defined());
    at::Tensor y = at::empty(x.sizes(), x.options().dtype(to_scalar_type(y_dtype)));
    at::Tensor h = at::empty(x.sizes(), x.options());
    at::Tensor rstd = empty_row_statistic(x);
    const at::Tensor workspace =
        empty_bytes(fused_add_rms_norm_fwd_workspace_size(params, xv, wv), x);
    tigon::fused_add_rms_norm_fwd(params, xv, to_view(residual, kFwd, "residual"), wv,
                                  to_view(h, kFwd, "h"), to_view(y, kFwd, "y"),
                                  to_view(flat(rstd), kFwd, "rstd"), to_workspace(workspace),
                                  context.stream);
    return std::make_tuple(std::move(y), std::move(h), std::move(rstd));
  });
}

// tigon::fused_add_rms_norm_bwd writing dx into `dx` (dh itself for the in-place op); returns dw.
at::Tensor run_backward(const char* op, const RmsNormParams& params, const at::Tensor& dy,
                        const at::Tensor& dh, const at::Tensor& h_arg,
                        const std::optional<at::Tensor>& weight_arg, const at::Tensor& rstd,
                        const at::Tensor& dx, Stream stream) {
  return translate_errors([&] {
    const at::Tensor h = with_row_layout(h_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const TensorView hv = to_view(h, op, "h");
    const TensorView wv = to_view(weight, op, "weight");
    at::Tensor dw = empty_parameter_grad(weight, h);
    const at::Tensor workspace =
        empty_bytes(fused_add_rms_norm_bwd_workspace_size(params, hv, wv), h);
    tigon::fused_add_rms_norm_bwd(params, to_view(dy, op, "dy"), to_view(dh, op, "dh"), hv, wv,
                                  to_view(flat(rstd), op, "rstd"), to_view(dx, op, "dx"),
                                  weight ? to_view(dw, op, "dw") : TensorView{},
                                  to_workspace(workspace), stream);
    return dw;
  });
}

// Returns (dx, dw); dx is the gradient of both x and residual.
std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_bwd(const at::Tensor& dy,
                                                          const at::Tensor& dh, const at::Tensor& h,
                                                          const std::optional<at::Tensor>& weight,
                                                          const at::Tensor& rstd, double offset,
                                                          std::string_view casting_mode) {
  const CudaContext context(h);
  const RmsNormParams params = rms_norm_params(0.0, offset, casting_mode, kBwd);
  at::Tensor dx = at::empty(h.sizes(), h.options());
  at::Tensor dw = run_backward(kBwd, params, with_row_layout(dy), with_row_layout(dh), h, weight,
                               rstd, dx, context.stream);
  return std::make_tuple(std::move(dx), std::move(dw));
}

// dx is written into dh (h's dtype, which the core checks), which needs a layout the core can
// address without a copy.
at::Tensor fused_add_rms_norm_bwd_inplace(const at::Tensor& dh, const at::Tensor& dy,
                                          const at::Tensor& h,
                                          const std::optional<at::Tensor>& weight,
                                          const at::Tensor& rstd, double offset,
                                          std::string_view casting_mode) {
  const CudaContext context(h);
  const RmsNormParams params = rms_norm_params(0.0, offset, casting_mode, kBwdInplace);
  check_in_place_rows(kBwdInplace, "dh", dh);
  return run_backward(kBwdInplace, params, with_row_layout(dy), dh, h, weight, rstd, dh,
                      context.stream);
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &fused_add_rms_norm_fwd);
  m.impl(kBwd, &fused_add_rms_norm_bwd);
  m.impl(kBwdInplace, &fused_add_rms_norm_bwd_inplace);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // fused_add_rms_norm_autograd.cpp.
  m.set_python_module("tigon.ops.fused_add_rms_norm");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "fused_add_rms_norm_fwd(Tensor x, Tensor residual, Tensor? weight, float eps, float offset, "
      "str casting_mode, bool in_place=False) -> (Tensor y, Tensor h, Tensor rstd)",
      tags);
  m.def(
      "fused_add_rms_norm_bwd(Tensor dy, Tensor dh, Tensor h, Tensor? weight, Tensor rstd, "
      "float offset, str casting_mode) -> (Tensor dx, Tensor dw)",
      tags);
  m.def(
      "fused_add_rms_norm_bwd_inplace(Tensor(a!) dh, Tensor dy, Tensor h, Tensor? weight, "
      "Tensor rstd, float offset, str casting_mode) -> Tensor dw",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("fused_add_rms_norm_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
