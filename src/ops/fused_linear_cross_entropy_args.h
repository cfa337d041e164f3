// Fused linear cross-entropy arguments after validation (src/ops/fused_linear_cross_entropy.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "math/fused_linear_cross_entropy_dweight.h"
#include "ops/cross_entropy_args.h"
#include "tigon/ops/fused_linear_cross_entropy.h"

namespace tigon::detail {

struct FlceArgs {
  // rows = N, vocab = V; logits / grad / workspace unset. The backward sets ce.grad_loss and no
  // loss outputs.
  CrossEntropyArgs ce;
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
  // grad_weight in the 16-bit dtype, accumulated in float32 in the workspace and in its own
  // storage (fused_linear_cross_entropy_dweight.h), rounded once at the end.
  bool dweight_fp32 = false;
  void* grad_bias = nullptr;
  DType grad_bias_dtype = DType::kFloat32;
  bool needs_grad() const { return grad_hidden || grad_weight || grad_bias; }
  // Float32 accumulation of a 16-bit weight's gradient runs the dW product as two, rows [0, R)
  // and [R, V) (the same for a float32 grad_weight, so the two are bitwise comparable).
  bool split_dweight() const {
    return grad_weight && dtype != DType::kFloat32 &&
           (dweight_fp32 || grad_weight_dtype == DType::kFloat32);
  }
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* cublas_handle = nullptr;
};

// The cross-entropy arguments of the chunk of rows [r0, r0 + rows), whose logits are the
// contiguous [rows, V] buffer `logits`; the gradient (for a.needs_grad()) is written over them.
inline CrossEntropyArgs chunk_args(const FlceArgs& a, std::int64_t r0, std::int64_t rows,
                                   void* logits) {
  CrossEntropyArgs c = a.ce;
  c.rows = rows;
  c.logits = logits;
  c.logits_row_stride = a.ce.vocab;
  c.target = a.ce.target + r0;
  c.grad = a.needs_grad() ? logits : nullptr;
  c.grad_row_stride = a.ce.vocab;
  c.lse = nullptr;
  if (a.ce.token_scale) c.token_scale = a.ce.token_scale + r0;
  if (a.ce.predicted) c.predicted = a.ce.predicted + r0;
  if (c.params.reduction == Reduction::kNone) {  // per-row outputs and upstream
    if (a.ce.loss) c.loss = a.ce.loss + r0;
    if (a.ce.z_loss) c.z_loss = a.ce.z_loss + r0;
    if (a.ce.accuracy) c.accuracy = a.ce.accuracy + r0;
    if (a.ce.grad_loss) c.grad_loss = a.ce.grad_loss + r0;
  }
  return c;
}

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t fused_linear_cross_entropy_workspace_size(const detail::FlceArgs& args);
void fused_linear_cross_entropy(const detail::FlceArgs& args);
// Steps (a) and (b) of fused_linear_cross_entropy_dweight.h: `low` (the workspace's D floats) and
// the float32 accumulators in `storage` become the [V, H] gradient in `dtype` in `storage`.
void finish_dweight(const detail::DweightSplit& split, const float* low, void* storage, DType dtype,
                    std::int64_t top_block);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t fused_linear_cross_entropy_workspace_size(const detail::FlceArgs& args, int device);
void fused_linear_cross_entropy(const detail::FlceArgs& args, int device, void* stream);
}  // namespace tigon::cuda
