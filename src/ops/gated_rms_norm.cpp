// Gated RMSNorm: the one validation point, then dispatch to a backend. The row tensors' checks
// are the norms' (core/norm_checks.h); the in-place alias check is RMSNorm's.
#include "tigon/ops/gated_rms_norm.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/gated_rms_norm_args.h"
#include "ops/rms_norm_checks.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

constexpr const char* kFwd = "gated_rms_norm_fwd";
constexpr const char* kBwd = "gated_rms_norm_bwd";

// eps, the weight ([H], floating, on x's device) and gate (x's shape and dtype).
struct Checked {
  detail::RowLayout x;
  detail::RowLayout gate;
};

Checked checked_inputs(const char* op, const GatedRmsNormParams& params, const TensorView& x,
                       const TensorView& gate, const TensorView& weight) {
  Checked c;
  c.x = detail::checked_norm_input(op, x);
  TIGON_CHECK_ARG(std::isfinite(params.eps) && params.eps >= 0.0f, op, "eps", "a finite value >= 0",
                  std::to_string(params.eps));
  c.gate = detail::checked_like(op, "gate", gate, x, x.dtype);
  TIGON_CHECK_ARG(weight.defined(), op, "weight", "a tensor of shape [H] (gated RMSNorm has one)",
                  "none");
  detail::check_floating(op, "weight", weight.dtype);
  detail::check_hidden_vector(op, "weight", weight, x.device, c.x.hidden);
  return c;
}

}  // namespace

std::size_t gated_rms_norm_fwd_workspace_size(const GatedRmsNormParams&, const TensorView& x,
                                              const TensorView&) {
  const detail::RowLayout xl = detail::checked_norm_input("gated_rms_norm_fwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::gated_rms_norm_fwd_workspace_size(xl.rows, xl.hidden, x.dtype, x.device.index);
  }
  return 0;
}

void gated_rms_norm_fwd(const GatedRmsNormParams& params, const TensorView& x,
                        const TensorView& gate, const TensorView& weight, const TensorView& y,
                        const TensorView& rstd, Workspace workspace, Stream stream) {
  const Checked c = checked_inputs(kFwd, params, x, gate, weight);
  const detail::RowLayout yl = detail::checked_like(kFwd, "y", y, x, x.dtype);
  detail::check_row_statistic(kFwd, "rstd", rstd, x.device, c.x.rows);
  detail::check_workspace(kFwd, workspace, gated_rms_norm_fwd_workspace_size(params, x, weight),
                          "gated_rms_norm_fwd_workspace_size");
  if (c.x.rows == 0) return;
  detail::GatedRmsNormFwdArgs a;
  a.params = params;
  a.rows = c.x.rows;
  a.hidden = c.x.hidden;
  a.x = x.data;
  a.x_row_stride = c.x.row_stride;
  a.x_dtype = x.dtype;
  a.gate = gate.data;
  a.gate_row_stride = c.gate.row_stride;
  a.weight = weight.data;
  a.weight_dtype = weight.dtype;
  a.y = y.data;
  a.y_row_stride = yl.row_stride;
  a.rstd = static_cast<float*>(rstd.data);
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::gated_rms_norm_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::gated_rms_norm_fwd(a);
  }
}

std::size_t gated_rms_norm_bwd_workspace_size(const GatedRmsNormParams&, const TensorView& x,
                                              const TensorView&) {
  const detail::RowLayout xl = detail::checked_norm_input("gated_rms_norm_bwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::gated_rms_norm_bwd_workspace_size(xl.rows, xl.hidden, x.dtype, x.device.index);
  }
  return cpu::gated_rms_norm_bwd_workspace_size(xl.rows, xl.hidden);
}

void gated_rms_norm_bwd(const GatedRmsNormParams& params, const TensorView& dy, const TensorView& x,
                        const TensorView& gate, const TensorView& weight, const TensorView& rstd,
                        const TensorView& dx, const TensorView& dgate, const TensorView& dw,
                        Workspace workspace, Stream stream) {
  const Checked c = checked_inputs(kBwd, params, x, gate, weight);
  const detail::RowLayout dyl = detail::checked_like(kBwd, "dy", dy, x, x.dtype);
  const detail::RowLayout dxl = detail::checked_like(kBwd, "dx", dx, x, x.dtype);
  const detail::RowLayout dgl = detail::checked_like(kBwd, "dgate", dgate, x, x.dtype);
  detail::check_alias(kBwd, "dx", dx, dxl, "dy", dy, dyl);
  detail::check_alias(kBwd, "dgate", dgate, dgl, "dy", dy, dyl);
  TIGON_CHECK_ARG(dx.data != dgate.data || c.x.rows == 0, kBwd, "dgate", "a buffer other than dx's",
                  "dx's data pointer");
  detail::check_row_statistic(kBwd, "rstd", rstd, x.device, c.x.rows);
  detail::check_dtype(kBwd, "dw", dw.dtype, weight.dtype);
  detail::check_hidden_vector(kBwd, "dw", dw, x.device, c.x.hidden);
  detail::check_workspace(kBwd, workspace, gated_rms_norm_bwd_workspace_size(params, x, weight),
                          "gated_rms_norm_bwd_workspace_size");
  detail::GatedRmsNormBwdArgs a;
  a.params = params;
  a.rows = c.x.rows;
  a.hidden = c.x.hidden;
  a.dy = dy.data;
  a.dy_row_stride = dyl.row_stride;
  a.x = x.data;
  a.x_row_stride = c.x.row_stride;
  a.x_dtype = x.dtype;
  a.gate = gate.data;
  a.gate_row_stride = c.gate.row_stride;
  a.weight = weight.data;
  a.weight_dtype = weight.dtype;
  a.rstd = static_cast<const float*>(rstd.data);
  a.dx = dx.data;
  a.dx_row_stride = dxl.row_stride;
  a.dgate = dgate.data;
  a.dgate_row_stride = dgl.row_stride;
  a.dw = dw.data;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::gated_rms_norm_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::gated_rms_norm_bwd(a);
  }
}

}  // namespace tigon
