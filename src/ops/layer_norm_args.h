// LayerNorm arguments after validation: flat rows, strides and dtypes. The contract between the
// validation layer (src/ops/layer_norm.cpp) and the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/ops/layer_norm.h"

namespace tigon::detail {

struct LayerNormFwdArgs {
  LayerNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* x = nullptr;  // y has x's dtype
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* weight = nullptr;          // null: no weight (1)
  DType weight_dtype = DType::kFloat32;  // x_dtype or float32; x_dtype when absent
  const void* bias = nullptr;            // null: no bias (0)
  DType bias_dtype = DType::kFloat32;    // x_dtype or float32; x_dtype when absent
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  float* mean = nullptr;
  float* rstd = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

struct LayerNormBwdArgs {
  LayerNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* dy = nullptr;  // dy and dx have x's dtype
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  const void* weight = nullptr;
  DType weight_dtype = DType::kFloat32;  // also dw's; x_dtype when absent
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;  // may equal dy (same layout)
  std::int64_t dx_row_stride = 0;
  void* dw = nullptr;                // [hidden] in weight_dtype; null without a weight
  void* db = nullptr;                // [hidden] in db_dtype; null: not wanted
  DType db_dtype = DType::kFloat32;  // x_dtype or float32; x_dtype when absent
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t layer_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool wants_dw,
                                          bool wants_db);
void layer_norm_fwd(const detail::LayerNormFwdArgs& args);
void layer_norm_bwd(const detail::LayerNormBwdArgs& args);
}  // namespace tigon::cpu

// The CUDA backend (src/cuda/layer_norm/; src/cuda/unavailable.cpp without CUDA).
namespace tigon::cuda {
std::size_t layer_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, DType x_dtype,
                                          bool wants_dw, bool wants_db, int device);
void layer_norm_fwd(const detail::LayerNormFwdArgs& args, int device, void* stream);
void layer_norm_bwd(const detail::LayerNormBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
