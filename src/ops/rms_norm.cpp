// RMSNorm: the one validation point (ops/rms_norm_checks.h), then dispatch to a backend.
#include "tigon/ops/rms_norm.h"

#include "core/check.h"
#include "ops/rms_norm_args.h"
#include "ops/rms_norm_checks.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

constexpr const char* kFwd = "rms_norm_fwd";
constexpr const char* kBwd = "rms_norm_bwd";

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
  const detail::RowLayout xl = detail::checked_rms_norm_input("rms_norm_fwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::rms_norm_fwd_workspace_size(xl.rows, xl.hidden, x.dtype, x.device.index);
  }
  return 0;
}

void rms_norm_fwd(const RmsNormParams& params, const TensorView& x, const TensorView& weight,
                  const TensorView& y, const TensorView& rstd, Workspace workspace, Stream stream) {
  detail::RmsNormFwdArgs a = detail::checked_rms_norm_fwd_args(kFwd, params, x, weight, y, rstd);
  detail::check_workspace(kFwd, workspace, rms_norm_fwd_workspace_size(params, x, weight),
                          "rms_norm_fwd_workspace_size");
  if (a.rows == 0) return;
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
  const detail::RowLayout xl = detail::checked_rms_norm_input("rms_norm_bwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::rms_norm_bwd_workspace_size(xl.rows, xl.hidden, x.dtype, weight.defined(),
                                             x.device.index);
  }
  return cpu::rms_norm_bwd_workspace_size(xl.rows, xl.hidden, weight.defined());
}

void rms_norm_bwd(const RmsNormParams& params, const TensorView& dy, const TensorView& x,
                  const TensorView& weight, const TensorView& rstd, const TensorView& dx,
                  const TensorView& dw, Workspace workspace, Stream stream) {
  detail::RmsNormBwdArgs a =
      detail::checked_rms_norm_bwd_args(kBwd, params, dy, x, weight, rstd, dx, dw);
  detail::check_workspace(kBwd, workspace, rms_norm_bwd_workspace_size(params, x, weight),
                          "rms_norm_bwd_workspace_size");
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::rms_norm_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::rms_norm_bwd(a);
  }
}

}  // namespace tigon
