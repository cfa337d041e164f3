// RMSNorm arguments after validation: flat rows, strides and dtypes. The contract between the
// validation layer (src/ops/rms_norm.cpp) and the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/ops/rms_norm.h"

namespace tigon::detail {

struct RmsNormFwdArgs {
  RmsNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* weight = nullptr;          // null: no affine
  DType weight_dtype = DType::kFloat32;  // x_dtype when there is no weight
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  DType y_dtype = DType::kFloat32;
  float* rstd = nullptr;
  // fused_add_rms_norm: the row normalized is h = x + residual (math/residual_add.h), stored to
  // h. Null for plain RMSNorm.
  const void* residual = nullptr;
  std::int64_t residual_row_stride = 0;
  void* h = nullptr;
  std::int64_t h_row_stride = 0;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

struct RmsNormBwdArgs {
  RmsNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* dy = nullptr;
  std::int64_t dy_row_stride = 0;
  DType dy_dtype = DType::kFloat32;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* weight = nullptr;
  DType weight_dtype = DType::kFloat32;
  const float* rstd = nullptr;
  void* dx = nullptr;  // may equal dy (same layout)
  std::int64_t dx_row_stride = 0;
  void* dw = nullptr;  // [hidden] in weight_dtype; null without a weight
  // fused_add_rms_norm: x is h, and dx = dh + the norm's dx (math/residual_add.h); dx may equal
  // dh (same layout). Null for plain RMSNorm.
  const void* dh = nullptr;
  std::int64_t dh_row_stride = 0;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool has_weight);
void rms_norm_fwd(const detail::RmsNormFwdArgs& args);
void rms_norm_bwd(const detail::RmsNormBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t rms_norm_fwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                        int device);
std::size_t rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                        bool has_weight, int device);
void rms_norm_fwd(const detail::RmsNormFwdArgs& args, int device, void* stream);
void rms_norm_bwd(const detail::RmsNormBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
