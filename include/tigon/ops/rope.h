// RoPE, Hugging Face's half-split rotary position embedding (Llama, Mistral, Qwen, Phi3, ...):
//     y = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[h:R], x[0:h]),  h = R / 2
// applied to the first R channels of the last dimension (R = cos's last size, the rotary dim);
// channels [R, D) pass through unchanged (Phi3 / GPT-NeoX partial rotary).
//
// Shapes. x (q or k) is a 4-D view [N0, N1, N2, D] with any strides (HF's q is a transposed view
// of the projection: [B, H, S, D] over [B, S, H, D] memory; it is read where it lies). cos and sin
// are 4-D views [C0, C1, C2, R] that broadcast to x: every Cd is 1 (its stride is then ignored) or
// x's size Nd. R is even, 2 <= R <= D. q and k share cos and sin, have the same dtype, and may
// differ in every size Cd is 1 for (GQA: Hq != Hkv heads). HF's cos[b, s, :] for q [B, H, S, D] is
// the view [B or 1, 1, S, R]; the torch binding forms it from (B, S, R), (1, S, R) or (S, R)
// tensors and unsqueeze_dim. k may be absent (data == nullptr, ndim == 0): q alone is rotated.
//
// Where each rounding happens. T = x's dtype, Tc = cos and sin's dtype, P = promote(T, Tc)
// (PyTorch's promotion: equal dtypes stay, otherwise float32), round_U = round to nearest even
// to U; every operation not marked round_ is exact or float32. For channel i < h (and i + h):
//     forward, y in P (HF: q * cos + rotate_half(q) * sin, each eager op rounding to P):
//       y[i]     = round_P(round_P(x[i] * cos[i])         + round_P(-x[i + h] * sin[i]))
//       y[i + h] = round_P(round_P(x[i + h] * cos[i + h]) + round_P( x[i]     * sin[i + h]))
//       y[j]     = x[j] for j >= R (converted to P, exact)
//     backward, dy in P, dx in T (what autograd of HF's eager function computes: MulBackward in
//     P, each branch's gradient rounded to x's dtype T, then summed in T):
//       a[j] = round_T(round_P(dy[j] * cos[j])),   u[j] = round_T(round_P(dy[j] * sin[j]))
//       dx[i]     = round_T(a[i]     + u[i + h]) + 0
//       dx[i + h] = round_T(a[i + h] - u[i])     + 0
//       dx[j]     = round_T(dy[j]) + 0 for j >= R
// "+ 0" is autograd's zero-filled slice gradient being added: a zero result is +0, never -0.
// With T == Tc (HF's rotary embedding returns cos/sin in the activation dtype) P == T.
// cos and sin need not be the [f, f] duplicated halves HF builds: each index is read as written.
//
// Outputs. rope_fwd writes y into y_q / y_k ([N0, N1, N2, D] views, dtype P, any strides); the
// backward writes dx into dx_q / dx_k (dtype T). An output may be its input itself (same data
// pointer and strides; requires P == T): the in-place mode, which then leaves channels >= R
// untouched. Any other overlap between an output and an input is undefined.
// No workspace; the CUDA backend never allocates or synchronizes (CUDA-graph safe).
// cos / sin gradients are not computed here (HF's cos and sin never require grad).
#pragma once

#include "tigon/tensor.h"

namespace tigon {

// The dtype y has (and dy must have) for activations of dtype x_dtype and cos/sin of cos_dtype.
DType rope_output_dtype(DType x_dtype, DType cos_dtype) noexcept;

// y_q = rope(q), y_k = rope(k) (k, y_k absent together).
void rope_fwd(const TensorView& q, const TensorView& k, const TensorView& cos,
              const TensorView& sin, const TensorView& y_q, const TensorView& y_k,
              Stream stream = {});

// dx_q, dx_k from dy_q, dy_k (the gradients of y_q, y_k). x's dtype T is dx's dtype; dy's dtype
// must be rope_output_dtype(T, cos dtype).
void rope_bwd(const TensorView& dy_q, const TensorView& dy_k, const TensorView& cos,
              const TensorView& sin, const TensorView& dx_q, const TensorView& dx_k,
              Stream stream = {});

}  // namespace tigon
