// Mixture-of-experts routed experts (Mixtral, Qwen3-MoE): each token t of hidden [N, H] goes to
// the K experts topk_ids[t, :] with the weights topk_weights[t, :] (the router's output, which
// stays Hugging Face's module), and expert e is a SwiGLU (or GeGLU) MLP with the 3-D parameters
// of transformers 5.17's experts modules, taken as they are:
//     w_gate_up [E, 2I, H]   rows [0, I) the gate projection, rows [I, 2I) the up projection
//     w_down    [E, H, I]
// The results are those of HF's eager experts loop (MixtralExperts.forward, Qwen3MoeExperts.
// forward) and of PyTorch autograd through it, in the activations' dtype T (float32, float16 or
// bfloat16). round_T = round to nearest even to T; W = topk_weights' dtype (float32, as
// Mixtral's router returns, or T, as Qwen3-MoE's); P = promote(T, W), the dtype of HF's product
// by the routing weight. Every operation not marked round_* is one correctly rounded float32
// operation, in the order written.
//
// Slots. Slot p = t * K + k routes token t to expert e = topk_ids[t, k]; e == E is a dropped slot
// (HF's `if expert_idx == self.num_experts: continue`), which contributes nothing and gets no
// gradient. Routing (computed by the forward into MoeExpertsRouting): the slots sorted by
// (expert, p), stable: sorted_slots[j] is the slot at sorted position j, expert e's positions are
// [expert_offsets[e], expert_offsets[e + 1]), dropped slots last (from expert_offsets[E]).
//
// Forward, per routed slot (t, k, e), x = hidden[t]:
//     a   = round_T(x @ w_gate_up[e]^T)           [2I]: float32 sums (GEMM, T in, float32
//                                                accumulate), gate = a[:I], up = a[I:]
//     y   = round_T(round_T(act(gate)) * up)     [I]: the GLU op (include/tigon/ops/glu.h)
//     d   = round_T(y @ w_down[e]^T)             [H]: float32 sums
//     c   = round_T(round_P(d * w[t, k]))        [H]: HF's `current * top_k_weights[...]` then
//                                                `.to(T)`; one rounding in effect (float32
//                                                product, then to T)
// Combine, per token, HF's index_add_ in T: experts in increasing order (k increasing within an
// expert), starting from 0:
//     out[t] = round_T(... round_T(round_T(0 + c_1) + c_2) ... + c_m)
// A token whose slots are all dropped gets zeros.
//
// Backward, given dout = dL/dout [N, H] (autograd through HF's loop), per routed slot:
//     dd  = round_T(dout[t] * w[t, k])            the product's backward, rounded to d's dtype
//     dw[t, k] = round_W(sum_h round_P(dout[t, h] * d[h]))   the broadcast weight's backward:
//                                                products in P, a float32 sum over H (a fixed
//                                                order: lane_sum on the CPU), rounded to W
//     dy  = round_T(dd @ w_down[e])               [I]
//     dgate, dup = GLU backward of (dy, gate, up) (include/tigon/ops/glu.h), each round_T
//     dx_p = round_T([dgate, dup] @ w_gate_up[e]) [H]
// and per expert, over its routed slots in sorted order (float32 sums, one rounding to the
// gradient's dtype G, float32 or T; experts without slots get zeros):
//     dw_down[e]    = round_G(sum_p dd_p^T y_p)          [H, I]
//     dw_gate_up[e] = round_G(sum_p [dgate, dup]_p^T x_p)  [2I, H]
// The hidden states' gradient adds the slots' dx_p in T in HF's autograd order, experts in
// DEcreasing order (the engine runs the last expert's branch first), starting from 0:
//     dhidden[t] = round_T(... round_T(0 + dx_last) ... + dx_first)
// (the router's own use of hidden adds its gradient outside this op, as in HF).
//
// Exactness: the GEMM sums are float32 in an order of the backend's (the CPU backend: its BLAS,
// 16-bit operands converted to float32 exactly; tiles of a fixed number of rows, so a dW sums in
// tiles fixed by the shape), so results equal HF's wherever both float32 sums round to the same
// T value (docs/ops/moe_experts.md gives the measured agreement). Everything else is exact to the
// formulas above, and the same inputs give the same bits (no float atomics; the combine and
// dhidden in the fixed orders above; dW by expert in sorted order).
//
// Shapes: hidden [N, H] (unit stride in H, any row stride); topk_ids [N, K] int64 contiguous
// with values in [0, E] (checked on the CPU); topk_weights [N, K] contiguous, float32 or T;
// w_gate_up [E, 2I, H] and w_down [E, H, I] contiguous in T; out [N, H] contiguous in T. Saved
// (for the backward): gate_up [N * K, 2I] (a per sorted position) and expert_out [N * K, H] (d
// per sorted position), contiguous in T. N, K, E, H, I >= 1 except N, which may be 0.
// The core never allocates or synchronizes: the caller passes every output and a workspace of
// moe_experts_*_workspace_size bytes (a function of the shapes and dtypes, never of the routing).
#pragma once

#include <cstddef>

#include "tigon/ops/glu.h"
#include "tigon/tensor.h"

namespace tigon {

struct MoeExpertsParams {
  GluActivation activation = GluActivation::kSilu;  // act above: SwiGLU (silu) or GeGLU
};

struct MoeExpertsInputs {
  TensorView hidden;        // [N, H], T
  TensorView topk_ids;      // [N, K], int64, values in [0, E]
  TensorView topk_weights;  // [N, K], float32 or T
  TensorView w_gate_up;     // [E, 2I, H], T
  TensorView w_down;        // [E, H, I], T
};

// The slots sorted by expert (header comment); written by the forward, read by the backward.
struct MoeExpertsRouting {
  TensorView expert_offsets;  // [E + 1] int64
  TensorView sorted_slots;    // [N * K] int64
};

// What the backward needs of the forward's intermediates, per sorted position; may be left
// undefined (both) in a forward without a backward.
struct MoeExpertsSaved {
  TensorView gate_up;     // [N * K, 2I], T
  TensorView expert_out;  // [N * K, H], T
};

struct MoeExpertsGrads {
  TensorView hidden;        // [N, H] contiguous, T
  TensorView topk_weights;  // [N, K] contiguous, W
  TensorView w_gate_up;     // [E, 2I, H] contiguous, float32 or T
  TensorView w_down;        // [E, H, I] contiguous, float32 or T
};

// saving: whether the call passes MoeExpertsSaved tensors (without them the workspace holds the
// per-slot expert outputs).
std::size_t moe_experts_fwd_workspace_size(const MoeExpertsParams& params,
                                           const MoeExpertsInputs& inputs, bool saving);

// out and routing (and saved, when defined) from the inputs (header comment).
void moe_experts_fwd(const MoeExpertsParams& params, const MoeExpertsInputs& inputs,
                     const MoeExpertsRouting& routing, const MoeExpertsSaved& saved,
                     const TensorView& out, Workspace workspace, Stream stream = {});

std::size_t moe_experts_bwd_workspace_size(const MoeExpertsParams& params,
                                           const MoeExpertsInputs& inputs,
                                           const MoeExpertsGrads& grads);

// The gradients for grad_out [N, H] (contiguous, T), from the forward's inputs, routing and saved
// intermediates (all required). Each gradient may be undefined (not computed).
void moe_experts_bwd(const MoeExpertsParams& params, const MoeExpertsInputs& inputs,
                     const MoeExpertsRouting& routing, const MoeExpertsSaved& saved,
                     const TensorView& grad_out, const MoeExpertsGrads& grads, Workspace workspace,
                     Stream stream = {});

}  // namespace tigon
