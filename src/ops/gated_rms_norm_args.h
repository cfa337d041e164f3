// Gated RMSNorm arguments after validation: flat rows, strides and dtypes. The contract between
// the validation layer (src/ops/gated_rms_norm.cpp) and the backends, which may assume all of it
// holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/ops/gated_rms_norm.h"

namespace tigon::detail {

struct GatedRmsNormFwdArgs {
  GatedRmsNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* x = nullptr;  // gate and y have x's dtype
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* gate = nullptr;
  std::int64_t gate_row_stride = 0;
  const void* weight = nullptr;  // [hidden]
  DType weight_dtype = DType::kFloat32;
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  float* rstd = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

struct GatedRmsNormBwdArgs {
  GatedRmsNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* dy = nullptr;
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;  // every row tensor has x's dtype
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* gate = nullptr;
  std::int64_t gate_row_stride = 0;
  const void* weight = nullptr;
  DType weight_dtype = DType::kFloat32;
  const float* rstd = nullptr;
  void* dx = nullptr;  // may equal dy (same layout)
  std::int64_t dx_row_stride = 0;
  void* dgate = nullptr;  // may equal dy (same layout)
  std::int64_t dgate_row_stride = 0;
  void* dw = nullptr;  // [hidden] in weight_dtype
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t gated_rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden);
void gated_rms_norm_fwd(const detail::GatedRmsNormFwdArgs& args);
void gated_rms_norm_bwd(const detail::GatedRmsNormBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t gated_rms_norm_fwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                              int device);
std::size_t gated_rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                              int device);
void gated_rms_norm_fwd(const detail::GatedRmsNormFwdArgs& args, int device, void* stream);
void gated_rms_norm_bwd(const detail::GatedRmsNormBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
