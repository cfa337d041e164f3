// Mixture-of-experts routing, softmax then top-k (Mixtral, Qwen3-MoE): from the router logits
// [N, E] of each token, the K experts of largest probability and their routing weights, as HF's
// MixtralTopKRouter / Qwen3MoeTopKRouter compute them after their F.linear, and the logits'
// gradient autograd gives through them. T = the logits' dtype; W = the weights' dtype (float32:
// Mixtral keeps them in float32; T: Qwen3-MoE casts them back). Every operation is one correctly
// rounded float32 operation in the order written, except exp (tigon's float32 exp, as the GLU's:
// within about an ulp of torch's Sleef exp, so probabilities agree within float32 rounding, not
// bitwise).
//
// Forward, per row x = float32(logits[t]):
//     m = max_j x_j;  e_j = exp(x_j - m);  s = sum_j e_j (j increasing);  p_j = e_j * (1 / s)
//     ids = the K largest p_j, largest first; equal values: the lower index first (torch.topk's
//           order among equal values is unspecified, and bf16 logits tie often: on such rows
//           HF may list, or with K cutting through a tie pick, another of the equal experts)
//     v_k = p_ids[k];  renormalize: S = sum_k v_k (k increasing), v_k = v_k / S
//     topk_ids[t, k] = ids[k];  topk_weights[t, k] = round_W(v_k)
// Backward, given gw = dL/dtopk_weights (as float32):
//     renormalize: S as above, c = -(sum_k gw_k * p_ids[k]) / (S * S);  dv_k = gw_k / S + c
//     else dv_k = gw_k
//     dp_j = dv_k where j = ids[k], else 0
//     dlogits[t, j] = round_T(p_j * (dp_j - sum_i dp_i * p_i))   (torch's softmax backward)
// Nothing is saved: the backward recomputes p from the logits and reads the forward's ids.
//
// Shapes: logits [N, E] (unit stride in E, any row stride), 1 <= K <= E; topk_ids [N, K] int64,
// topk_weights [N, K] and grad_weights [N, K] contiguous in W; grad_logits [N, E] contiguous in T.
// No workspace; the core never allocates or synchronizes.
#pragma once

#include <cstdint>

#include "tigon/tensor.h"

namespace tigon {

struct MoeRouterParams {
  std::int64_t top_k = 1;
  bool renormalize = true;  // Mixtral: always; Qwen3-MoE: config.norm_topk_prob
};

void moe_router_fwd(const MoeRouterParams& params, const TensorView& logits,
                    const TensorView& topk_ids, const TensorView& topk_weights, Stream stream = {});

void moe_router_bwd(const MoeRouterParams& params, const TensorView& grad_weights,
                    const TensorView& logits, const TensorView& topk_ids,
                    const TensorView& grad_logits, Stream stream = {});

}  // namespace tigon
