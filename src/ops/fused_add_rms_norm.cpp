// Fused residual add + RMSNorm: the one validation point, then dispatch. The norm's checks are
// RMSNorm's (ops/rms_norm_checks.h, applied to x, which has h's shape and dtype); this file adds
// those of residual, h and dh.
#include "tigon/ops/fused_add_rms_norm.h"

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/fused_add_rms_norm_args.h"
#include "ops/rms_norm_checks.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

constexpr const char* kFwd = "fused_add_rms_norm_fwd";
constexpr const char* kBwd = "fused_add_rms_norm_bwd";

}  // namespace

// RMSNorm's forward workspace (slice sums of long rows on a GPU without clusters).
std::size_t fused_add_rms_norm_fwd_workspace_size(const RmsNormParams&, const TensorView& x,
                                                  const TensorView&) {
  const detail::RowLayout xl =
      detail::checked_rms_norm_input("fused_add_rms_norm_fwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::rms_norm_fwd_workspace_size(xl.rows, xl.hidden, x.dtype, x.device.index);
  }
  return 0;
}

void fused_add_rms_norm_fwd(const RmsNormParams& params, const TensorView& x,
                            const TensorView& residual, const TensorView& weight,
                            const TensorView& h, const TensorView& y, const TensorView& rstd,
                            Workspace workspace, Stream stream) {
  detail::RmsNormFwdArgs a = detail::checked_rms_norm_fwd_args(kFwd, params, x, weight, y, rstd);
  const detail::RowLayout rl = detail::checked_like(kFwd, "residual", residual, x, x.dtype);
  const detail::RowLayout hl = detail::checked_like(kFwd, "h", h, x, x.dtype);
  detail::check_workspace(kFwd, workspace, fused_add_rms_norm_fwd_workspace_size(params, x, weight),
                          "fused_add_rms_norm_fwd_workspace_size");
  if (a.rows == 0) return;
  a.residual = residual.data;
  a.residual_row_stride = rl.row_stride;
  a.h = h.data;
  a.h_row_stride = hl.row_stride;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::fused_add_rms_norm_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::rms_norm_fwd(a);
  }
}

std::size_t fused_add_rms_norm_bwd_workspace_size(const RmsNormParams&, const TensorView& h,
                                                  const TensorView& weight) {
  const detail::RowLayout hl =
      detail::checked_rms_norm_input("fused_add_rms_norm_bwd_workspace_size", h, "h");
  if (h.device.type == DeviceType::kCUDA) {
    return cuda::fused_add_rms_norm_bwd_workspace_size(hl.rows, hl.hidden, h.dtype,
                                                       weight.defined(), h.device.index);
  }
  return cpu::rms_norm_bwd_workspace_size(hl.rows, hl.hidden, weight.defined());
}

void fused_add_rms_norm_bwd(const RmsNormParams& params, const TensorView& dy, const TensorView& dh,
                            const TensorView& h, const TensorView& weight, const TensorView& rstd,
                            const TensorView& dx, const TensorView& dw, Workspace workspace,
                            Stream stream) {
  detail::RmsNormBwdArgs a =
      detail::checked_rms_norm_bwd_args(kBwd, params, dy, h, weight, rstd, dx, dw, "h");
  const detail::RowLayout dhl = detail::checked_like(kBwd, "dh", dh, h, h.dtype, "h");
  const detail::RowLayout dxl = detail::row_layout(kBwd, "dx", dx);
  detail::check_alias(kBwd, "dx", dx, dxl, "dh", dh, dhl);
  detail::check_workspace(kBwd, workspace, fused_add_rms_norm_bwd_workspace_size(params, h, weight),
                          "fused_add_rms_norm_bwd_workspace_size");
  a.dh = dh.data;
  a.dh_row_stride = dhl.row_stride;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (h.device.type == DeviceType::kCUDA) {
    cuda::fused_add_rms_norm_bwd(a, h.device.index, stream.cuda_stream);
  } else {
    cpu::rms_norm_bwd(a);
  }
}

}  // namespace tigon
