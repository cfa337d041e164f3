// Gated RMSNorm (Qwen3-Next / Qwen3.5 `RMSNormGated`, the norm of the gated delta-net output):
//     y = rms_norm(x) * silu(gate)                 over the last dimension, norm before gate
//
// Shapes: x and gate are [..., H] of x's dtype T (R rows), each with unit stride in the last
// dimension and leading dimensions that collapse to one row stride; y has x's shape and dtype T
// and its own row stride. weight is [H], contiguous, of any floating dtype Tw (required: the HF
// module always has one). rstd is [R] float32, contiguous: saved for the backward.
//
// Where each rounding happens: HF's forward, cast for cast. round_U = round to nearest even to U;
// P = promote(T, Tw) (PyTorch's promotion: T when Tw == T, else float32); every operation not
// marked round_ is float32, none contracted into an FMA:
//     r = 1 / sqrt(sum(x * x) / H + eps)         hidden_states.to(float32).pow(2).mean(-1), rsqrt
//     n = round_T(x * r)                         hidden_states.to(input_dtype)
//     p = round_P(w * n)                         self.weight * n, in the promoted dtype (exact in
//                                                float32 for two 16-bit values, then one rounding)
//     a = silu(gate) = gate / (1 + exp(-gate))   ACT2FN["silu"](gate.to(float32)), float32
//     y = round_T(p * a)                         (p * a in float32).to(input_dtype)
// r, n and p are RMSNorm's kLlama steps (math/rms_norm.h) and silu is SwiGLU's (math/glu-inl.h),
// so given the same r the forward has the bits of HF's module up to exp's last float32 bit (<= 1
// ulp of T). r itself sums in tigon's fixed order, not torch's, and may differ by a float32 ulp;
// where that flips the rounding of n (a tie of T), the two later roundings can carry it to a few
// ulps of T in y (seen: 3 ulps on 1 element of 32768, fp16). rstd[row] = r.
//
// Backward, all float32, the rounding steps treated as identity by the gradient (as autograd
// does), with xhat = x * r unrounded and p, a recomputed as in the forward:
//     dgate = round_T(silu_backward(dy * p, gate))     PyTorch's silu_backward formula
//     dp    = dy * a                                   the gradient reaching the RMSNorm output
//     dx    = round_T(r * (m - xhat * sum(m * xhat) / H)),  m = dp * w     (RMSNorm's dx)
//     dw    = round_Tw(sum over rows of dp * n)         (RMSNorm's dw)
// dw adds float32 partials per fixed chunk of rows, the chunks in order: bitwise identical run
// to run, for any thread count. dx and dgate may each alias dy (same data and layout): every
// element of dy and gate is read before the dx / dgate element at the same place is written.
//
// Not covered (docs/ops/gated_rms_norm.md): Falcon-H1's `FalconH1RMSNormGated` (group-wise
// statistics, gate before the norm, no rounding of n to T).
#pragma once

#include <cstddef>

#include "tigon/tensor.h"

namespace tigon {

struct GatedRmsNormParams {
  float eps = 1e-6f;  // >= 0
};

// Scratch bytes gated_rms_norm_fwd needs (0 on the CPU; always ask: a CUDA forward may need some).
std::size_t gated_rms_norm_fwd_workspace_size(const GatedRmsNormParams& params, const TensorView& x,
                                              const TensorView& weight);

// Scratch bytes gated_rms_norm_bwd needs: float32 dW partials, a function of the shapes only.
std::size_t gated_rms_norm_bwd_workspace_size(const GatedRmsNormParams& params, const TensorView& x,
                                              const TensorView& weight);

void gated_rms_norm_fwd(const GatedRmsNormParams& params, const TensorView& x,
                        const TensorView& gate, const TensorView& weight, const TensorView& y,
                        const TensorView& rstd, Workspace workspace = {}, Stream stream = {});

// dy, dx and dgate have x's shape and dtype; dw is [H] in the weight's dtype (zeros with zero
// rows). rstd is the forward's.
void gated_rms_norm_bwd(const GatedRmsNormParams& params, const TensorView& dy, const TensorView& x,
                        const TensorView& gate, const TensorView& weight, const TensorView& rstd,
                        const TensorView& dx, const TensorView& dgate, const TensorView& dw,
                        Workspace workspace, Stream stream = {});

}  // namespace tigon
