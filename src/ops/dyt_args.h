// DyT arguments after validation: flat rows, strides and dtypes. The contract between the
// validation layer (src/ops/dyt.cpp) and the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/elementwise_norm_args.h"
#include "tigon/ops/dyt.h"

namespace tigon::detail {

struct DytParams {
  const void* alpha = nullptr;  // one element
  DType alpha_dtype = DType::kFloat32;
  const void* gamma = nullptr;  // [hidden]
  DType gamma_dtype = DType::kFloat32;
  const void* beta = nullptr;  // [hidden]; null: no beta (0)
  DType beta_dtype = DType::kFloat32;
};

using DytFwdArgs = ElementwiseNormFwdArgs<DytParams>;

struct DytBwdArgs {
  DytParams params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* dy = nullptr;
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  void* dx = nullptr;  // may equal dy (same layout)
  std::int64_t dx_row_stride = 0;
  void* dalpha = nullptr;  // alpha's dtype
  void* dgamma = nullptr;  // gamma's dtype
  void* dbeta = nullptr;   // beta's dtype; null without beta
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t dyt_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool has_beta);
void dyt_fwd(const detail::DytFwdArgs& args);
void dyt_bwd(const detail::DytBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t dyt_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool has_beta,
                                   int device);
void dyt_fwd(const detail::DytFwdArgs& args, int device, void* stream);
void dyt_bwd(const detail::DytBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
