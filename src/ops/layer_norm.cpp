// LayerNorm: the one validation point, then dispatch to a backend.
#include "tigon/ops/layer_norm.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/layer_norm_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::check_dtype;
using detail::check_floating;

constexpr const char* kFwd = "layer_norm_fwd";
constexpr const char* kBwd = "layer_norm_bwd";

void check_params(const char* op, const LayerNormParams& p) {
  TIGON_CHECK_ARG(std::isfinite(p.eps) && p.eps >= 0.0f, op, "eps", "a finite value >= 0",
                  std::to_string(p.eps));
}

// A parameter or its gradient: x's dtype or float32 (PyTorch's mixed-precision parameters).
void check_parameter_dtype(const char* op, const char* arg, DType got, DType x_dtype) {
  check_floating(op, arg, got);
  TIGON_CHECK_ARG(got == x_dtype || got == DType::kFloat32, op, arg,
                  std::string("dtype ") + dtype_name(x_dtype) + " (x's) or float32",
                  dtype_name(got), ErrorCode::kTypeError);
}

// weight, bias: [H], contiguous, in x's dtype or float32, on x's device; or absent.
void check_parameter(const char* op, const char* arg, const TensorView& t, const TensorView& x,
                     std::int64_t hidden) {
  if (!t.defined()) return;
  check_parameter_dtype(op, arg, t.dtype, x.dtype);
  detail::check_hidden_vector(op, arg, t, x.device, hidden);
}

}  // namespace

std::size_t layer_norm_fwd_workspace_size(const LayerNormParams&, const TensorView& x) {
  detail::checked_norm_input("layer_norm_fwd_workspace_size", x);
  return 0;
}

void layer_norm_fwd(const LayerNormParams& params, const TensorView& x, const TensorView& weight,
                    const TensorView& bias, const TensorView& y, const TensorView& mean,
                    const TensorView& rstd, Workspace workspace, Stream stream) {
  const detail::RowLayout xl = detail::checked_norm_input(kFwd, x);
  check_params(kFwd, params);
  check_parameter(kFwd, "weight", weight, x, xl.hidden);
  check_parameter(kFwd, "bias", bias, x, xl.hidden);
  const detail::RowLayout yl = detail::checked_like(kFwd, "y", y, x, x.dtype);
  detail::check_row_statistic(kFwd, "mean", mean, x.device, xl.rows);
  detail::check_row_statistic(kFwd, "rstd", rstd, x.device, xl.rows);
  detail::check_workspace(kFwd, workspace, layer_norm_fwd_workspace_size(params, x),
                          "layer_norm_fwd_workspace_size");
  if (xl.rows == 0) return;

  detail::LayerNormFwdArgs a;
  a.params = params;
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.weight = weight.defined() ? weight.data : nullptr;
  a.weight_dtype = weight.defined() ? weight.dtype : x.dtype;
  a.bias = bias.defined() ? bias.data : nullptr;
  a.bias_dtype = bias.defined() ? bias.dtype : x.dtype;
  a.y = y.data;
  a.y_row_stride = yl.row_stride;
  a.mean = static_cast<float*>(mean.data);
  a.rstd = static_cast<float*>(rstd.data);
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::layer_norm_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::layer_norm_fwd(a);
  }
}

std::size_t layer_norm_bwd_workspace_size(const LayerNormParams&, const TensorView& x,
                                          bool wants_dw, bool wants_db) {
  const detail::RowLayout xl = detail::checked_norm_input("layer_norm_bwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::layer_norm_bwd_workspace_size(xl.rows, xl.hidden, x.dtype, wants_dw, wants_db,
                                               x.device.index);
  }
  return cpu::layer_norm_bwd_workspace_size(xl.rows, xl.hidden, wants_dw, wants_db);
}

void layer_norm_bwd(const LayerNormParams& params, const TensorView& dy, const TensorView& x,
                    const TensorView& weight, const TensorView& mean, const TensorView& rstd,
                    const TensorView& dx, const TensorView& dw, const TensorView& db,
                    Workspace workspace, Stream stream) {
  const detail::RowLayout xl = detail::checked_norm_input(kBwd, x);
  check_params(kBwd, params);
  check_parameter(kBwd, "weight", weight, x, xl.hidden);
  const detail::RowLayout dyl = detail::checked_like(kBwd, "dy", dy, x, x.dtype);
  const detail::RowLayout dxl = detail::checked_like(kBwd, "dx", dx, x, x.dtype);
  if (dx.data == dy.data && xl.rows > 0) {
    TIGON_CHECK_ARG(dxl.row_stride == dyl.row_stride, kBwd, "dx",
                    "the same row stride as dy when writing dx in place into dy",
                    std::to_string(dxl.row_stride) + " vs " + std::to_string(dyl.row_stride));
  }
  detail::check_row_statistic(kBwd, "mean", mean, x.device, xl.rows);
  detail::check_row_statistic(kBwd, "rstd", rstd, x.device, xl.rows);

  const bool has_weight = weight.defined();
  TIGON_CHECK_ARG(dw.defined() == has_weight, kBwd, "dw",
                  has_weight ? "a tensor (there is a weight)" : "no tensor (there is no weight)",
                  dw.defined() ? "a tensor" : "none");
  if (has_weight) {
    check_dtype(kBwd, "dw", dw.dtype, weight.dtype, " (weight's dtype)");
    detail::check_hidden_vector(kBwd, "dw", dw, x.device, xl.hidden);
  }
  if (db.defined()) {
    check_parameter_dtype(kBwd, "db", db.dtype, x.dtype);
    detail::check_hidden_vector(kBwd, "db", db, x.device, xl.hidden);
  }
  detail::check_workspace(kBwd, workspace,
                          layer_norm_bwd_workspace_size(params, x, has_weight, db.defined()),
                          "layer_norm_bwd_workspace_size");

  detail::LayerNormBwdArgs a;
  a.params = params;
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.dy = dy.data;
  a.dy_row_stride = dyl.row_stride;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.weight = has_weight ? weight.data : nullptr;
  a.weight_dtype = has_weight ? weight.dtype : x.dtype;
  a.mean = static_cast<const float*>(mean.data);
  a.rstd = static_cast<const float*>(rstd.data);
  a.dx = dx.data;
  a.dx_row_stride = dxl.row_stride;
  a.dw = has_weight ? dw.data : nullptr;
  a.db = db.defined() ? db.data : nullptr;
  a.db_dtype = db.defined() ? db.dtype : x.dtype;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::layer_norm_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::layer_norm_bwd(a);
  }
}

}  // namespace tigon
