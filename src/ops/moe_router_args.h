// Softmax-then-top-k routing arguments after validation (src/ops/moe_router.cpp).
#pragma once

#include <cstdint>

#include "tigon/dtype.h"

namespace tigon::detail {

struct MoeRouterArgs {
  std::int64_t rows = 0;     // N
  std::int64_t experts = 0;  // E
  std::int64_t top_k = 0;    // K, 1 <= K <= E
  bool renormalize = true;
  DType dtype = DType::kFloat32;         // T: logits, grad_logits
  DType weight_dtype = DType::kFloat32;  // W: topk_weights, grad_weights (float32 or T)
  const void* logits = nullptr;          // [N, E], row stride logits_row_stride
  std::int64_t logits_row_stride = 0;
  std::int64_t* topk_ids = nullptr;    // [N, K] contiguous (written by the forward)
  void* topk_weights = nullptr;        // [N, K] contiguous (forward)
  const void* grad_weights = nullptr;  // [N, K] contiguous (backward)
  void* grad_logits = nullptr;         // [N, E] contiguous (backward)
};

}  // namespace tigon::detail

namespace tigon::cpu {
void moe_router_fwd(const detail::MoeRouterArgs& args);
void moe_router_bwd(const detail::MoeRouterArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
void moe_router_fwd(const detail::MoeRouterArgs& args, int device, void* stream);
void moe_router_bwd(const detail::MoeRouterArgs& args, int device, void* stream);
}  // namespace tigon::cuda
