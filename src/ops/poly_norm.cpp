// PolyNorm: the one validation point, then dispatch to a backend.
#include "tigon/ops/poly_norm.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/poly_norm_args.h"
#include "ops/rms_norm_checks.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

constexpr const char* kFwd = "poly_norm_fwd";
constexpr const char* kBwd = "poly_norm_bwd";

detail::PolyNormParams checked_params(const char* op, const TensorView& x, const TensorView& weight,
                                      const TensorView& bias, float eps) {
  TIGON_CHECK_ARG(std::isfinite(eps) && eps >= 0.0f, op, "eps", "a finite value >= 0",
                  std::to_string(eps));
  detail::check_parameter_dtype(op, "weight", weight.dtype, x.dtype);
  detail::check_parameter_vector(op, "weight", weight, x.device, 3, "one weight per power");
  detail::check_parameter_dtype(op, "bias", bias.dtype, x.dtype);
  detail::check_scalar_parameter(op, "bias", bias, x.device, bias.dtype);
  detail::PolyNormParams p;
  p.weight = weight.data;
  p.weight_dtype = weight.dtype;
  p.bias = bias.data;
  p.bias_dtype = bias.dtype;
  p.eps = eps;
  return p;
}

}  // namespace

void poly_norm_fwd(const TensorView& x, const TensorView& weight, const TensorView& bias,
                   const TensorView& y, float eps, Workspace, Stream stream) {
  const detail::RowLayout xl = detail::checked_norm_input(kFwd, x);
  const detail::PolyNormParams params = checked_params(kFwd, x, weight, bias, eps);
  const detail::RowLayout yl = detail::checked_like(kFwd, "y", y, x, x.dtype);
  if (xl.rows == 0) return;
  const detail::PolyNormFwdArgs a = detail::elementwise_norm_fwd_args(params, x, xl, y, yl);
  if (x.device.type == DeviceType::kCUDA) {
    cuda::poly_norm_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::poly_norm_fwd(a);
  }
}

std::size_t poly_norm_bwd_workspace_size(const TensorView& x) {
  const detail::RowLayout xl = detail::checked_norm_input("poly_norm_bwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::poly_norm_bwd_workspace_size(xl.rows, xl.hidden, x.device.index);
  }
  return cpu::poly_norm_bwd_workspace_size(xl.rows, xl.hidden);
}

void poly_norm_bwd(const TensorView& dy, const TensorView& x, const TensorView& weight,
                   const TensorView& bias, const TensorView& dx, const TensorView& dweight,
                   const TensorView& dbias, float eps, Workspace workspace, Stream stream) {
  const detail::RowLayout xl = detail::checked_norm_input(kBwd, x);
  detail::PolyNormBwdArgs a;
  a.params = checked_params(kBwd, x, weight, bias, eps);
  const detail::RowLayout dyl = detail::checked_like(kBwd, "dy", dy, x, x.dtype);
  const detail::RowLayout dxl = detail::checked_like(kBwd, "dx", dx, x, x.dtype);
  detail::check_alias(kBwd, "dx", dx, dxl, "dy", dy, dyl);
  detail::check_dtype(kBwd, "dweight", dweight.dtype, weight.dtype);
  detail::check_parameter_vector(kBwd, "dweight", dweight, x.device, 3, "weight's");
  detail::check_scalar_parameter(kBwd, "dbias", dbias, x.device, bias.dtype);
  detail::check_workspace(kBwd, workspace, poly_norm_bwd_workspace_size(x),
                          "poly_norm_bwd_workspace_size");
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.dy = dy.data;
  a.dy_row_stride = dyl.row_stride;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.dx = dx.data;
  a.dx_row_stride = dxl.row_stride;
  a.dweight = dweight.data;
  a.dbias = dbias.data;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::poly_norm_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::poly_norm_bwd(a);
  }
}

}  // namespace tigon
