// DyT: the one validation point, then dispatch to a backend.
#include "tigon/ops/dyt.h"

#include <string>

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/dyt_args.h"
#include "ops/rms_norm_checks.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

constexpr const char* kFwd = "dyt_fwd";
constexpr const char* kBwd = "dyt_bwd";

detail::DytParams checked_params(const char* op, const TensorView& x, std::int64_t hidden,
                                 const TensorView& alpha, const TensorView& gamma,
                                 const TensorView& beta) {
  detail::check_parameter_dtype(op, "alpha", alpha.dtype, x.dtype);
  detail::check_scalar_parameter(op, "alpha", alpha, x.device, alpha.dtype);
  detail::check_parameter_dtype(op, "gamma", gamma.dtype, x.dtype);
  detail::check_hidden_vector(op, "gamma", gamma, x.device, hidden);
  if (beta.defined()) {
    detail::check_parameter_dtype(op, "beta", beta.dtype, x.dtype);
    detail::check_hidden_vector(op, "beta", beta, x.device, hidden);
  }
  detail::DytParams p;
  p.alpha = alpha.data;
  p.alpha_dtype = alpha.dtype;
  p.gamma = gamma.data;
  p.gamma_dtype = gamma.dtype;
  p.beta = beta.defined() ? beta.data : nullptr;
  p.beta_dtype = beta.defined() ? beta.dtype : x.dtype;
  return p;
}

// dgamma / dbeta: [H] contiguous in the parameter's dtype.
void check_parameter_grad(const char* op, const char* arg, const TensorView& t, const TensorView& x,
                          std::int64_t hidden, DType dtype) {
  detail::check_dtype(op, arg, t.dtype, dtype);
  detail::check_hidden_vector(op, arg, t, x.device, hidden);
}

}  // namespace

void dyt_fwd(const TensorView& x, const TensorView& alpha, const TensorView& gamma,
             const TensorView& beta, const TensorView& y, Workspace, Stream stream) {
  const detail::RowLayout xl = detail::checked_norm_input(kFwd, x);
  const detail::DytParams params = checked_params(kFwd, x, xl.hidden, alpha, gamma, beta);
  const detail::RowLayout yl = detail::checked_like(kFwd, "y", y, x, x.dtype);
  if (xl.rows == 0) return;
  const detail::DytFwdArgs a = detail::elementwise_norm_fwd_args(params, x, xl, y, yl);
  if (x.device.type == DeviceType::kCUDA) {
    cuda::dyt_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::dyt_fwd(a);
  }
}

std::size_t dyt_bwd_workspace_size(const TensorView& x, bool has_beta) {
  const detail::RowLayout xl = detail::checked_norm_input("dyt_bwd_workspace_size", x);
  if (x.device.type == DeviceType::kCUDA) {
    return cuda::dyt_bwd_workspace_size(xl.rows, xl.hidden, has_beta, x.device.index);
  }
  return cpu::dyt_bwd_workspace_size(xl.rows, xl.hidden, has_beta);
}

void dyt_bwd(const TensorView& dy, const TensorView& x, const TensorView& alpha,
             const TensorView& gamma, const TensorView& beta, const TensorView& dx,
             const TensorView& dalpha, const TensorView& dgamma, const TensorView& dbeta,
             Workspace workspace, Stream stream) {
  const detail::RowLayout xl = detail::checked_norm_input(kBwd, x);
  detail::DytBwdArgs a;
  a.params = checked_params(kBwd, x, xl.hidden, alpha, gamma, beta);
  const detail::RowLayout dyl = detail::checked_like(kBwd, "dy", dy, x, x.dtype);
  const detail::RowLayout dxl = detail::checked_like(kBwd, "dx", dx, x, x.dtype);
  detail::check_alias(kBwd, "dx", dx, dxl, "dy", dy, dyl);
  detail::check_scalar_parameter(kBwd, "dalpha", dalpha, x.device, alpha.dtype);
  check_parameter_grad(kBwd, "dgamma", dgamma, x, xl.hidden, gamma.dtype);
  if (beta.defined()) check_parameter_grad(kBwd, "dbeta", dbeta, x, xl.hidden, beta.dtype);
  detail::check_workspace(kBwd, workspace, dyt_bwd_workspace_size(x, beta.defined()),
                          "dyt_bwd_workspace_size");
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.dy = dy.data;
  a.dy_row_stride = dyl.row_stride;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.dx = dx.data;
  a.dx_row_stride = dxl.row_stride;
  a.dalpha = dalpha.data;
  a.dgamma = dgamma.data;
  a.dbeta = beta.defined() ? dbeta.data : nullptr;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::dyt_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::dyt_bwd(a);
  }
}

}  // namespace tigon
