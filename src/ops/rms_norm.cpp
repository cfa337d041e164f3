// RMSNorm: the one validation point, then dispatch to a backend.
#include "tigon/ops/rms_norm.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/rms_norm_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::check_dtype;
using detail::check_floating;

constexpr const char* kFwd = "rms_norm_fwd";
constexpr const char* kBwd = "rms_norm_bwd";

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

void check_same_device(const char* op, const char* arg, const TensorView& t, Device device) {
  detail::check_device(op, arg, t, device, "x's device");
}

// weight: [H], contiguous, floating, on x's device; or absent.
void check_weight(const char* op, const TensorView& w, const TensorView& x, std::int64_t hidden) {
  if (!w.defined()) return;
  check_floating(op, "weight", w.dtype);
  detail::check_hidden_vector(op, "weight", w, x.device, hidden);
}

detail::RowLayout checked_x(const char* op, const TensorView& x) {
  check_floating(op, "x", x.dtype);
  const detail::RowLayout layout = detail::row_layout(op, "x", x);
  TIGON_CHECK_ARG(layout.hidden > 0, op, "x", "a last dimension (hidden size) >= 1",
                  detail::shape_string(x));
  detail::check_backend(op, "x", x.device);
  return layout;
}

}  // namespace

const char* casting_mode_name(CastingMode mode) noexcept {
  switch (mode) {
    case CastingMode::kLlama: return "llama";
    case CastingMode::kGemma: return "gemma";
    case CastingMode::kNone: return "none";
  }
  return "unknown";
}

DType rms_norm_output_dtype(const RmsNormParams& params, DType x_dtype, DType weight_dtype,
                            bool has_weight) noexcept {
  if (!has_weight || params.casting_mode == CastingMode::kGemma) return x_dtype;
  return promote_types(x_dtype, weight_dtype);
}

std::size_t rms_norm_fwd_workspace_size(const RmsNormParams&, const TensorView& x,
                                        const TensorView&) {
  const detail::RowLayout xl = checked_x("rms_norm_fwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::rms_norm_fwd_workspace_size(xl.rows, xl.hidden, x.dtype, x.device.index);
  }
  return 0;
}

void rms_norm_fwd(const RmsNormParams& params, const TensorView& x, const TensorView& weight,
                  const TensorView& y, const TensorView& rstd, Workspace workspace, Stream stream) {
  const detail::RowLayout xl = checked_x(kFwd, x);
  check_params(kFwd, params, weight.defined());
  check_weight(kFwd, weight, x, xl.hidden);

  const DType y_dtype = rms_norm_output_dtype(params, x.dtype, weight.dtype, weight.defined());
  check_same_device(kFwd, "y", y, x.device);
  check_dtype(kFwd, "y", y.dtype, y_dtype);
  detail::check_same_shape(kFwd, "y", y, x);
  const detail::RowLayout yl = detail::row_layout(kFwd, "y", y);
  detail::check_row_statistic(kFwd, "rstd", rstd, x.device, xl.rows);
  detail::check_workspace(kFwd, workspace, rms_norm_fwd_workspace_size(params, x, weight),
                          "rms_norm_fwd_workspace_size");
  if (xl.rows == 0) return;

  detail::RmsNormFwdArgs a;
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
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::rms_norm_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::rms_norm_fwd(a);
  }
}

std::size_t rms_norm_bwd_workspace_size(const RmsNormParams&, const TensorView& x,
                                        const TensorView& weight) {
  const detail::RowLayout xl = checked_x("rms_norm_bwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::rms_norm_bwd_workspace_size(xl.rows, xl.hidden, x.dtype, weight.defined(),
                                             x.device.index);
  }
  return cpu::rms_norm_bwd_workspace_size(xl.rows, xl.hidden, weight.defined());
}

void rms_norm_bwd(const RmsNormParams& params, const TensorView& dy, const TensorView& x,
                  const TensorView& weight, const TensorView& rstd, const TensorView& dx,
                  const TensorView& dw, Workspace workspace, Stream stream) {
  const detail::RowLayout xl = checked_x(kBwd, x);
  check_params(kBwd, params, weight.defined());
  check_weight(kBwd, weight, x, xl.hidden);
  const bool has_weight = weight.defined();

  const DType y_dtype = rms_norm_output_dtype(params, x.dtype, weight.dtype, has_weight);
  check_same_device(kBwd, "dy", dy, x.device);
  check_dtype(kBwd, "dy", dy.dtype, y_dtype);
  detail::check_same_shape(kBwd, "dy", dy, x);
  const detail::RowLayout dyl = detail::row_layout(kBwd, "dy", dy);

  check_same_device(kBwd, "dx", dx, x.device);
  check_dtype(kBwd, "dx", dx.dtype, x.dtype);
  detail::check_same_shape(kBwd, "dx", dx, x);
  const detail::RowLayout dxl = detail::row_layout(kBwd, "dx", dx);
  if (dx.data == dy.data && xl.rows > 0) {
    TIGON_CHECK_ARG(dxl.row_stride == dyl.row_stride, kBwd, "dx",
                    "the same row stride as dy when writing dx in place into dy",
                    std::to_string(dxl.row_stride) + " vs " + std::to_string(dyl.row_stride));
  }
  detail::check_row_statistic(kBwd, "rstd", rstd, x.device, xl.rows);

  if (has_weight) {
    check_same_device(kBwd, "dw", dw, x.device);
    check_dtype(kBwd, "dw", dw.dtype, weight.dtype);
    TIGON_CHECK_ARG(
        dw.ndim == 1 && dw.sizes[0] == xl.hidden && (xl.hidden == 1 || dw.strides[0] == 1), kBwd,
        "dw", "a contiguous tensor of shape [" + std::to_string(xl.hidden) + "]",
        detail::shape_string(dw));
    TIGON_CHECK_ARG(dw.data != nullptr, kBwd, "dw", "a non-null data pointer", "nullptr");
  }

  detail::check_workspace(kBwd, workspace, rms_norm_bwd_workspace_size(params, x, weight),
                          "rms_norm_bwd_workspace_size");

  detail::RmsNormBwdArgs a;
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
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::rms_norm_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::rms_norm_bwd(a);
  }
}

}  // namespace tigon
