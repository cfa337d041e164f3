// RMSNorm operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/rms_norm.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "rms_norm_fwd";
constexpr const char* kBwd = "rms_norm_bwd";
constexpr const char* kBwdInplace = "rms_norm_bwd_inplace";

// tigon::rms_norm_bwd writing dx into `dx` (dy itself for the in-place op); returns dw.
at::Tensor run_backward(const char* op, const RmsNormParams& params, const at::Tensor& dy,
                        const at::Tensor& x_arg, const std::optional<at::Tensor>& weight_arg,
                        const at::Tensor& rstd_arg, const at::Tensor& dx, Stream stream) {
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const at::Tensor rstd = flat(rstd_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const TensorView xv = to_view(x, op, "x");
    const TensorView wv = to_view(weight, op, "weight");
    const TensorView dyv = to_view(dy, op, "dy");
    const TensorView rstdv = to_view(rstd, op, "rstd");
    const TensorView dxv = to_view(dx, op, "dx");
    at::Tensor dw = empty_parameter_grad(weight, x);
    const at::Tensor workspace = empty_bytes(rms_norm_bwd_workspace_size(params, xv, wv), x);
    tigon::rms_norm_bwd(params, dyv, xv, wv, rstdv, dxv,
                        weight ? to_view(dw, op, "dw") : TensorView{}, to_workspace(workspace),
                        stream);
    return dw;
  });
}

// tigon::rms_norm_fwd; in_place is only read by the autograd kernel (rms_norm_autograd.cpp).
std::tuple<at::Tensor, at::Tensor> rms_norm_fwd(const at::Tensor& x_arg,
                                                const std::optional<at::Tensor>& weight_arg,
                                                double eps, double offset,
                                                std::string_view casting_mode, bool /*in_place*/) {
  const CudaContext context(x_arg);
  const RmsNormParams params = rms_norm_params(eps, offset, casting_mode, kFwd);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const std::optional<at::Tensor> weight = contiguous_parameter(weight_arg);
    const TensorView xv = to_view(x, kFwd, "x");
    const TensorView wv = to_view(weight, kFwd, "weight");
    const DType y_dtype = rms_norm_output_dtype(params, xv.dtype, wv.dtype, wv.defined());
    at::Tensor y = at::empty(x.sizes(), x.options().dtype(to_scalar_type(y_dtype)));
    at::Tensor rstd = empty_row_statistic(x);
    const at::Tensor workspace = empty_bytes(rms_norm_fwd_workspace_size(params, xv, wv), x);
    tigon::rms_norm_fwd(params, xv, wv, to_view(y, kFwd, "y"), to_view(flat(rstd), kFwd, "rstd"),
                        to_workspace(workspace), context.stream);
    return std::make_tuple(std::move(y), std::move(rstd));
  });
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x,
                                                const std::optional<at::Tensor>& weight,
                                                const at::Tensor& rstd, double offset,
                                                std::string_view casting_mode) {
  const CudaContext context(x);
  const RmsNormParams params = rms_norm_params(0.0, offset, casting_mode, kBwd);
  at::Tensor dx = at::empty(x.sizes(), x.options());
  at::Tensor dw =
      run_backward(kBwd, params, with_row_layout(dy), x, weight, rstd, dx, context.stream);
  return std::make_tuple(std::move(dx), std::move(dw));
}

// tigon::rms_norm_bwd_inplace: dx is written into dy.
at::Tensor rms_norm_bwd_inplace(const at::Tensor& dy, const at::Tensor& x,
                                const std::optional<at::Tensor>& weight, const at::Tensor& rstd,
                                double offset, std::string_view casting_mode) {
  const CudaContext context(x);
  const RmsNormParams params = rms_norm_params(0.0, offset, casting_mode, kBwdInplace);
  // dx is written into dy: dy needs x's dtype and a layout the core can address without a copy.
  const TensorView dyv = translate_errors([&] { return to_view(dy, kBwdInplace, "dy"); });
  const TensorView xv = translate_errors([&] { return to_view(x, kBwdInplace, "x"); });
  TORCH_CHECK_TYPE(dyv.dtype == xv.dtype,
                   argument_message(kBwdInplace, "dy",
                                    std::string("dtype ") + dtype_name(xv.dtype) +
                                        " (x's dtype: dx is written into dy)",
                                    dtype_name(dyv.dtype)));
  check_in_place_rows(kBwdInplace, "dy", dy);
  return run_backward(kBwdInplace, params, dy, x, weight, rstd, dy, context.stream);
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &rms_norm_fwd);
  m.impl(kBwd, &rms_norm_bwd);
  m.impl(kBwdInplace, &rms_norm_bwd_inplace);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // rms_norm_autograd.cpp.
  m.set_python_module("tigon.ops.rms_norm");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "rms_norm_fwd(Tensor x, Tensor? weight, float eps, float offset, str casting_mode, "
      "bool in_place=False) -> (Tensor y, Tensor rstd)",
      tags);
  m.def(
      "rms_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, float offset, "
      "str casting_mode) -> (Tensor dx, Tensor dw)",
      tags);
  m.def(
      "rms_norm_bwd_inplace(Tensor(a!) dy, Tensor x, Tensor? weight, Tensor rstd, float offset, "
      "str casting_mode) -> Tensor dw",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("rms_norm_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
