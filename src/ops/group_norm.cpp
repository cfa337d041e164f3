// GroupNorm: the one validation point, then dispatch to a backend.
#include "tigon/ops/group_norm.h"

#include <cmath>
#include <string>

#include "core/check.h"
#include "core/norm_checks.h"
#include "ops/group_norm_args.h"

namespace tigon {
namespace {

using detail::check_dtype;
using detail::check_floating;
using detail::GroupNormShape;

constexpr const char* kFwd = "group_norm_fwd";
constexpr const char* kBwd = "group_norm_bwd";

void check_params(const char* op, const GroupNormParams& p) {
  TIGON_CHECK_ARG(std::isfinite(p.eps) && p.eps >= 0.0f, op, "eps", "a finite value >= 0",
                  std::to_string(p.eps));
  TIGON_CHECK_ARG(p.groups >= 1, op, "groups", "a group count >= 1", std::to_string(p.groups));
}

std::string stride_string(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.strides[d]);
  return s + "]";
}

// Each sample of t [N, C, *] contiguous; returns the sample stride (the sample size when N <= 1).
std::int64_t checked_sample_stride(const char* op, const char* arg, const TensorView& t) {
  std::int64_t expected = 1;
  for (int d = t.ndim - 1; d >= 1; --d) {
    TIGON_CHECK_ARG(t.sizes[d] == 1 || t.strides[d] == expected, op, arg,
                    "contiguous samples (dimensions 1.. in row-major order; any stride in "
                    "dimension 0)",
                    "strides " + stride_string(t) + " for shape " + detail::shape_string(t));
    expected *= t.sizes[d];
  }
  return t.sizes[0] > 1 ? t.strides[0] : expected;
}

// x: floating, [N, C, *] with C a multiple of groups and a non-empty group, contiguous samples.
GroupNormShape checked_input(const char* op, const GroupNormParams& p, const TensorView& x) {
  check_floating(op, "x", x.dtype);
  TIGON_CHECK_ARG(x.ndim >= 2, op, "x", "a tensor [N, C, *] of 2 or more dimensions",
                  detail::shape_string(x));
  detail::check_backend(op, "x", x.device);
  for (int d = 0; d < x.ndim; ++d) {
    TIGON_CHECK_ARG(x.sizes[d] >= 0, op, "x", "non-negative sizes", detail::shape_string(x));
  }
  GroupNormShape s;
  s.samples = x.sizes[0];
  s.channels = x.sizes[1];
  s.groups = p.groups;
  s.spatial = 1;
  for (int d = 2; d < x.ndim; ++d) s.spatial *= x.sizes[d];
  TIGON_CHECK_ARG(
      s.channels >= 1 && s.channels % p.groups == 0, op, "groups",
      "a divisor of x's channel count " + std::to_string(s.channels) + " (x's dimension 1)",
      std::to_string(p.groups));
  TIGON_CHECK_ARG(s.spatial >= 1, op, "x", "non-empty dimensions after the channels",
                  detail::shape_string(x));
  TIGON_CHECK_ARG(s.samples == 0 || x.data != nullptr, op, "x", "a non-null data pointer",
                  "nullptr");
  return s;
}

// y, dy, dx: x's shape, dtype and device, contiguous samples; returns the sample stride.
std::int64_t checked_like(const char* op, const char* arg, const TensorView& t,
                          const TensorView& x) {
  detail::check_device(op, arg, t, x.device, "x's device");
  check_dtype(op, arg, t.dtype, x.dtype, " (x's dtype)");
  detail::check_same_shape(op, arg, t, x);
  TIGON_CHECK_ARG(t.sizes[0] == 0 || t.data != nullptr, op, arg, "a non-null data pointer",
                  "nullptr");
  return checked_sample_stride(op, arg, t);
}

// weight, bias: [C], contiguous, in x's dtype or float32, on x's device; or absent.
void check_parameter(const char* op, const char* arg, const TensorView& t, const TensorView& x,
                     std::int64_t channels) {
  if (!t.defined()) return;
  check_floating(op, arg, t.dtype);
  detail::check_parameter_dtype(op, arg, t.dtype, x.dtype);
  detail::check_parameter_vector(op, arg, t, x.device, channels, "x's channel count");
}

void check_statistics(const char* op, const TensorView& mean, const TensorView& rstd,
                      const TensorView& x, const GroupNormShape& s) {
  detail::check_row_statistic(op, "mean", mean, x.device, s.rows());
  detail::check_row_statistic(op, "rstd", rstd, x.device, s.rows());
}

}  // namespace

std::size_t group_norm_fwd_workspace_size(const GroupNormParams& params, const TensorView& x) {
  checked_input("group_norm_fwd_workspace_size", params, x);
  return 0;
}

void group_norm_fwd(const GroupNormParams& params, const TensorView& x, const TensorView& weight,
                    const TensorView& bias, const TensorView& y, const TensorView& mean,
                    const TensorView& rstd, Workspace workspace, Stream stream) {
  check_params(kFwd, params);
  const GroupNormShape s = checked_input(kFwd, params, x);
  const std::int64_t x_stride = checked_sample_stride(kFwd, "x", x);
  check_parameter(kFwd, "weight", weight, x, s.channels);
  check_parameter(kFwd, "bias", bias, x, s.channels);
  const std::int64_t y_stride = checked_like(kFwd, "y", y, x);
  check_statistics(kFwd, mean, rstd, x, s);
  detail::check_workspace(kFwd, workspace, group_norm_fwd_workspace_size(params, x),
                          "group_norm_fwd_workspace_size");
  if (s.samples == 0) return;

  detail::GroupNormFwdArgs a;
  a.params = params;
  a.shape = s;
  a.x = x.data;
  a.x_sample_stride = x_stride;
  a.x_dtype = x.dtype;
  a.weight = weight.defined() ? weight.data : nullptr;
  a.weight_dtype = weight.defined() ? weight.dtype : x.dtype;
  a.bias = bias.defined() ? bias.data : nullptr;
  a.bias_dtype = bias.defined() ? bias.dtype : x.dtype;
  a.y = y.data;
  a.y_sample_stride = y_stride;
  a.mean = static_cast<float*>(mean.data);
  a.rstd = static_cast<float*>(rstd.data);
  if (x.device.type == DeviceType::kCUDA) {
    cuda::group_norm_fwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::group_norm_fwd(a);
  }
}

std::size_t group_norm_bwd_workspace_size(const GroupNormParams& params, const TensorView& x) {
  check_params("group_norm_bwd_workspace_size", params);
  return detail::group_norm_channel_sums_bytes(
      checked_input("group_norm_bwd_workspace_size", params, x));
}

void group_norm_bwd(const GroupNormParams& params, const TensorView& dy, const TensorView& x,
                    const TensorView& weight, const TensorView& mean, const TensorView& rstd,
                    const TensorView& dx, const TensorView& dw, const TensorView& db,
                    Workspace workspace, Stream stream) {
  check_params(kBwd, params);
  const GroupNormShape s = checked_input(kBwd, params, x);
  const std::int64_t x_stride = checked_sample_stride(kBwd, "x", x);
  check_parameter(kBwd, "weight", weight, x, s.channels);
  const std::int64_t dy_stride = checked_like(kBwd, "dy", dy, x);
  const std::int64_t dx_stride = checked_like(kBwd, "dx", dx, x);
  if (dx.data == dy.data && s.samples > 1) {
    TIGON_CHECK_ARG(dx_stride == dy_stride, kBwd, "dx",
                    "the same sample stride as dy when writing dx in place into dy",
                    std::to_string(dx_stride) + " vs " + std::to_string(dy_stride));
  }
  check_statistics(kBwd, mean, rstd, x, s);
  const bool has_weight = weight.defined();
  TIGON_CHECK_ARG(dw.defined() == has_weight, kBwd, "dw",
                  has_weight ? "a tensor (there is a weight)" : "no tensor (there is no weight)",
                  dw.defined() ? "a tensor" : "none");
  if (has_weight) {
    check_dtype(kBwd, "dw", dw.dtype, weight.dtype, " (weight's dtype)");
    detail::check_parameter_vector(kBwd, "dw", dw, x.device, s.channels, "x's channel count");
  }
  if (db.defined()) {
    check_floating(kBwd, "db", db.dtype);
    detail::check_parameter_dtype(kBwd, "db", db.dtype, x.dtype);
    detail::check_parameter_vector(kBwd, "db", db, x.device, s.channels, "x's channel count");
  }
  detail::check_workspace(kBwd, workspace, group_norm_bwd_workspace_size(params, x),
                          "group_norm_bwd_workspace_size");

  detail::GroupNormBwdArgs a;
  a.params = params;
  a.shape = s;
  a.dy = dy.data;
  a.dy_sample_stride = dy_stride;
  a.x = x.data;
  a.x_sample_stride = x_stride;
  a.x_dtype = x.dtype;
  a.weight = has_weight ? weight.data : nullptr;
  a.weight_dtype = has_weight ? weight.dtype : x.dtype;
  a.mean = static_cast<const float*>(mean.data);
  a.rstd = static_cast<const float*>(rstd.data);
  a.dx = dx.data;
  a.dx_sample_stride = dx_stride;
  a.dw = has_weight ? dw.data : nullptr;
  a.db = db.defined() ? db.data : nullptr;
  a.db_dtype = db.defined() ? db.dtype : x.dtype;
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (x.device.type == DeviceType::kCUDA) {
    cuda::group_norm_bwd(a, x.device.index, stream.cuda_stream);
  } else {
    cpu::group_norm_bwd(a);
  }
}

}  // namespace tigon
