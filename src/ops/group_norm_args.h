// GroupNorm arguments after validation: samples of contiguous groups, strides and dtypes. The
// contract between the validation layer (src/ops/group_norm.cpp) and the backends, which may
// assume all of it holds. A row is one (sample, group): `group_size` = (C / G) * S contiguous
// elements at x + n * x_sample_stride + g * group_size.
#pragma once

#include <cstddef>
#include <cstdint>

#include "math/host_device.h"
#include "tigon/ops/group_norm.h"

namespace tigon::detail {

struct GroupNormShape {
  std::int64_t samples = 0;   // N
  std::int64_t channels = 0;  // C
  std::int64_t groups = 0;    // G
  std::int64_t spatial = 0;   // S (1 for [N, C])
  TIGON_HD std::int64_t channels_per_group() const { return channels / groups; }
  TIGON_HD std::int64_t group_size() const { return channels_per_group() * spatial; }  // L
  TIGON_HD std::int64_t rows() const { return samples * groups; }
};

struct GroupNormFwdArgs {
  GroupNormParams params;
  GroupNormShape shape;
  const void* x = nullptr;  // y has x's dtype
  std::int64_t x_sample_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* weight = nullptr;          // null: no weight (1)
  DType weight_dtype = DType::kFloat32;  // x_dtype or float32; x_dtype when absent
  const void* bias = nullptr;            // null: no bias (0)
  DType bias_dtype = DType::kFloat32;    // x_dtype or float32; x_dtype when absent
  void* y = nullptr;
  std::int64_t y_sample_stride = 0;
  float* mean = nullptr;  // [N * G]
  float* rstd = nullptr;  // [N * G]
};

struct GroupNormBwdArgs {
  GroupNormParams params;
  GroupNormShape shape;
  const void* dy = nullptr;  // dy and dx have x's dtype
  std::int64_t dy_sample_stride = 0;
  const void* x = nullptr;
  std::int64_t x_sample_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* weight = nullptr;
  DType weight_dtype = DType::kFloat32;  // also dw's; x_dtype when absent
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;  // may equal dy (same layout)
  std::int64_t dx_sample_stride = 0;
  void* dw = nullptr;                // [C] in weight_dtype; null without a weight
  void* db = nullptr;                // [C] in db_dtype; null: not wanted
  DType db_dtype = DType::kFloat32;  // x_dtype or float32; x_dtype when absent
  void* workspace = nullptr;         // group_norm_bwd_workspace_size bytes
  std::size_t workspace_bytes = 0;
};

// The per-(sample, channel) sums A = sum(dy * xhat) and B = sum(dy), [N, C] float32 each, at the
// start of the backward's workspace (both backends).
inline std::size_t group_norm_channel_sums_bytes(const GroupNormShape& s) {
  return static_cast<std::size_t>(2 * s.samples * s.channels) * sizeof(float);
}

}  // namespace tigon::detail

namespace tigon::cpu {
void group_norm_fwd(const detail::GroupNormFwdArgs& args);
void group_norm_bwd(const detail::GroupNormBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
void group_norm_fwd(const detail::GroupNormFwdArgs& args, int device, void* stream);
void group_norm_bwd(const detail::GroupNormBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
