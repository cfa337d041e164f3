// Mixture-of-experts experts arguments after validation (src/ops/moe_experts.cpp): the contract
// between the validation layer and the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/dtype.h"
#include "tigon/ops/moe_experts.h"

namespace tigon::detail {

struct MoeExpertsShape {
  GluActivation activation = GluActivation::kSilu;
  DType dtype = DType::kFloat32;         // T: hidden, weights, out, saved, grad_out, grad_hidden
  DType weight_dtype = DType::kFloat32;  // W: topk_weights and their gradient (float32 or T)
  std::int64_t tokens = 0;               // N
  std::int64_t top_k = 0;                // K
  std::int64_t experts = 0;              // E
  std::int64_t hidden = 0;               // H
  std::int64_t intermediate = 0;         // I
  std::int64_t slots() const { return tokens * top_k; }
};

struct MoeExpertsTensors {
  const void* hidden = nullptr;  // [N, H], row stride hidden_row_stride, unit column stride
  std::int64_t hidden_row_stride = 0;
  const std::int64_t* topk_ids = nullptr;  // [N, K] contiguous, values in [0, E]
  const void* topk_weights = nullptr;      // [N, K] contiguous, W
  const void* w_gate_up = nullptr;         // [E, 2I, H] contiguous, T
  const void* w_down = nullptr;            // [E, H, I] contiguous, T
  std::int64_t* expert_offsets = nullptr;  // [E + 1]
  std::int64_t* sorted_slots = nullptr;    // [N * K]
  void* saved_gate_up = nullptr;           // [N * K, 2I] contiguous, T; null: not saved
  void* saved_expert_out = nullptr;        // [N * K, H] contiguous, T; null: not saved
};

struct MoeExpertsFwdArgs {
  MoeExpertsShape shape;
  MoeExpertsTensors t;
  void* out = nullptr;  // [N, H] contiguous, T
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

struct MoeExpertsBwdArgs {
  MoeExpertsShape shape;
  MoeExpertsTensors t;             // routing and saved as the forward wrote them (read only here)
  const void* grad_out = nullptr;  // [N, H] contiguous, T
  void* grad_hidden = nullptr;     // [N, H] contiguous, T, or null
  void* grad_topk_weights = nullptr;  // [N, K] contiguous, W, or null
  void* grad_w_gate_up = nullptr;     // [E, 2I, H] contiguous, grad_w_dtype, or null
  DType grad_w_gate_up_dtype = DType::kFloat32;
  void* grad_w_down = nullptr;  // [E, H, I] contiguous, or null
  DType grad_w_down_dtype = DType::kFloat32;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t moe_experts_fwd_workspace_size(const detail::MoeExpertsShape& shape, bool saving);
std::size_t moe_experts_bwd_workspace_size(const detail::MoeExpertsShape& shape);
void moe_experts_fwd(const detail::MoeExpertsFwdArgs& args);
void moe_experts_bwd(const detail::MoeExpertsBwdArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t moe_experts_fwd_workspace_size(const detail::MoeExpertsShape& shape, bool saving,
                                           int device);
std::size_t moe_experts_bwd_workspace_size(const detail::MoeExpertsShape& shape, int device);
void moe_experts_fwd(const detail::MoeExpertsFwdArgs& args, int device, void* stream);
void moe_experts_bwd(const detail::MoeExpertsBwdArgs& args, int device, void* stream);
}  // namespace tigon::cuda
