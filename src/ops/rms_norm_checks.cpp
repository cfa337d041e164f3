#include "ops/rms_norm_checks.h"

#include <cmath>
#include <string>

#include "core/norm_checks.h"

namespace tigon::detail {
namespace {

void check_params(const char* op, const RmsNormParams& p, bool has_weight) {
  TIGON_CHECK_ARG(std::isfinite(p.eps) && p.eps >= 0.0f, op, "eps", "a finite value >= 0",
                  std::to_string(p.eps));
  TIGON_CHECK_ARG(std::isfinite(p.offset), op, "offset", "a finite value",
                  std::to_string(p.offset));
  TIGON_CHECK_ARG(has_weight || p.offset == 0.0f, op, "offset",
                  "0 when there is no weight (elementwise_affine=False)", std::to_string(p.offset));
  const int mode = static_cast<int>(p.casting_mode);
  TIGON_CHECK_ARG(mode >= 0 && mode <= 2, op, "casting_mode", "kLlama, kGemma or kNone",
                  std::to_string(mode));
}

// weight: [H], contiguous, floating, on x's device; or absent.
void check_weight(const char* op, const TensorView& w, const TensorView& x, std::int64_t hidden) {
  if (!w.defined()) return;
  check_floating(op, "weight", w.dtype);
  check_hidden_vector(op, "weight", w, x.device, hidden);
}

std::string possessive(const char* name) { return std::string(name) + "'s"; }

}  // namespace

RowLayout checked_rms_norm_input(const char* op, const TensorView& x, const char* x_name) {
  return checked_norm_input(op, x, x_name);
}

void check_alias(const char* op, const char* a_name, const TensorView& a, const RowLayout& a_layout,
                 const char* b_name, const TensorView& b, const RowLayout& b_layout) {
  if (a.data != b.data || a_layout.rows == 0) return;
  const std::string why =
      std::string(" as ") + b_name + " when writing " + a_name + " in place into " + b_name;
  TIGON_CHECK_ARG(a.dtype == b.dtype, op, a_name, std::string("the same dtype") + why,
                  std::string(dtype_name(a.dtype)) + " vs " + dtype_name(b.dtype),
                  ErrorCode::kTypeError);
  TIGON_CHECK_ARG(
      a_layout.row_stride == b_layout.row_stride, op, a_name,
      std::string("the same row stride") + why,
      std::to_string(a_layout.row_stride) + " vs " + std::to_string(b_layout.row_stride));
}

RmsNormFwdArgs checked_rms_norm_fwd_args(const char* op, const RmsNormParams& params,
                                         const TensorView& x, const TensorView& weight,
                                         const TensorView& y, const TensorView& rstd) {
  const RowLayout xl = checked_rms_norm_input(op, x);
  check_params(op, params, weight.defined());
  check_weight(op, weight, x, xl.hidden);
  const DType y_dtype = rms_norm_output_dtype(params, x.dtype, weight.dtype, weight.defined());
  const RowLayout yl = checked_like(op, "y", y, x, y_dtype);
  check_row_statistic(op, "rstd", rstd, x.device, xl.rows);

  RmsNormFwdArgs a;
  a.params = params;
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.weight = weight.defined() ? weight.data : nullptr;
  a.weight_dtype = weight.defined() ? weight.dtype : x.dtype;
  a.y = y.data;
  a.y_row_stride = yl.row_stride;
  a.y_dtype = y_dtype;
  a.rstd = static_cast<float*>(rstd.data);
  return a;
}

RmsNormBwdArgs checked_rms_norm_bwd_args(const char* op, const RmsNormParams& params,
                                         const TensorView& dy, const TensorView& x,
                                         const TensorView& weight, const TensorView& rstd,
                                         const TensorView& dx, const TensorView& dw,
                                         const char* x_name) {
  const RowLayout xl = checked_rms_norm_input(op, x, x_name);
  check_params(op, params, weight.defined());
  check_weight(op, weight, x, xl.hidden);
  const bool has_weight = weight.defined();
  const DType y_dtype = rms_norm_output_dtype(params, x.dtype, weight.dtype, has_weight);
  const RowLayout dyl = checked_like(op, "dy", dy, x, y_dtype, x_name);
  const RowLayout dxl = checked_like(op, "dx", dx, x, x.dtype, x_name);
  check_alias(op, "dx", dx, dxl, "dy", dy, dyl);
  check_row_statistic(op, "rstd", rstd, x.device, xl.rows);
  if (has_weight) {
    check_device(op, "dw", dw, x.device, possessive(x_name) + " device");
    check_dtype(op, "dw", dw.dtype, weight.dtype);
    TIGON_CHECK_ARG(
        dw.ndim == 1 && dw.sizes[0] == xl.hidden && (xl.hidden == 1 || dw.strides[0] == 1), op,
        "dw", "a contiguous tensor of shape [" + std::to_string(xl.hidden) + "]", shape_string(dw));
    TIGON_CHECK_ARG(dw.data != nullptr, op, "dw", "a non-null data pointer", "nullptr");
  }

  RmsNormBwdArgs a;
  a.params = params;
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.dy = dy.data;
  a.dy_row_stride = dyl.row_stride;
  a.dy_dtype = y_dtype;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.weight = has_weight ? weight.data : nullptr;
  a.weight_dtype = has_weight ? weight.dtype : x.dtype;
  a.rstd = static_cast<const float*>(rstd.data);
  a.dx = dx.data;
  a.dx_row_stride = dxl.row_stride;
  a.dw = has_weight ? dw.data : nullptr;
  return a;
}

}  // namespace tigon::detail
