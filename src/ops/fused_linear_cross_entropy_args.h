// Fused linear cross-entropy arguments after validation (src/ops/fused_linear_cross_entropy.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cross_entropy_args.h"
#include "tigon/ops/fused_linear_cross_entropy.h"

namespace tigon::detail {

struct FlceArgs {
  CrossEntropyArgs ce;  // rows = N, vocab = V; logits / grad / workspace unset
  std::int64_t hidden_size = 0;
  std::int64_t chunk_rows = 0;
  const void* hidden = nullptr;
  std::int64_t hidden_row_stride = 0;
  DType dtype = DType::kFloat32;  // hidden's and weight's
  const void* weight = nullptr;
  const void* bias = nullptr;
  DType bias_dtype = DType::kFloat32;
  void* grad_hidden = nullptr;  // contiguous [N, H] in dtype
  void* grad_weight = nullptr;  // contiguous [V, H]
  DType grad_weight_dtype = DType::kFloat32;
  void* grad_bias = nullptr;
  DType grad_bias_dtype = DType::kFloat32;
  bool needs_grad() const { return grad_hidden || grad_weight || grad_bias; }
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* cublas_handle = nullptr;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t fused_linear_cross_entropy_workspace_size(const detail::FlceArgs& args);
void fused_linear_cross_entropy(const detail::FlceArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t fused_linear_cross_entropy_workspace_size(const detail::FlceArgs& args);
void fused_linear_cross_entropy(const detail::FlceArgs& args, int device, void* stream);
}  // namespace tigon::cuda
