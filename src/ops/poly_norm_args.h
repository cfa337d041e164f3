// PolyNorm arguments after validation: flat rows, strides and dtypes. The contract between the
// validation layer (src/ops/poly_norm.cpp) and the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/elementwise_norm_args.h"
#include "tigon/ops/poly_norm.h"

namespace tigon::detail {

struct PolyNormParams {
  const void* weight = nullptr;  // [3]; weight[0] multiplies norm(x^3)
  DType weight_dtype = DType::kFloat32;
  const void* bias = nullptr;  // one element
  DType bias_dtype = DType::kFloat32;
  float eps = 1e-6f;
};

using PolyNormFwdArgs = ElementwiseNormFwdArgs<PolyNormParams>;

struct PolyNormBwdArgs {
  PolyNormParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* dy = nullptr;
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  void* dx = nullptr;  // may equal dy (same layout)
  std::int64_t dx_row_stride = 0;
  void* dweight = nullptr;  // [3], weight's dtype
  void* dbias = nullptr;    // one element, bias's dtype
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t poly_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden);
void poly_norm_fwd(const detail::PolyNormFwdArgs& args);
void poly_norm_bwd(const detail::PolyNormBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t poly_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, int device);
void poly_norm_fwd(const detail::PolyNormFwdArgs& args, int device, void* stream);
void poly_norm_bwd(const detail::PolyNormBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
