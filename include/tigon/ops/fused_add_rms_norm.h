// Fused residual add + RMSNorm: h = x + residual, y = rms_norm(h), in one pass over the row.
// A decoder layer's `hidden_states = residual + hidden_states` followed by the next norm.
//
// Shapes and layouts as RMSNorm (include/tigon/ops/rms_norm.h): x, residual and h are [..., H]
// of x's dtype T (residual must have T: no promotion), each with unit stride in the last
// dimension and its own row stride; y has x's shape; weight is [H] or absent; rstd is [R] float32.
//
// Where each rounding happens (round_T: round to nearest even to T; the rest is float32):
//     h = round_T(x + residual)       HF's `residual + hidden_states` in T: one float32 add of the
//                                     two T values, rounded once (as PyTorch's add kernels do)
//     y, rstd = rms_norm(h)           every casting mode, offset and y dtype exactly as RMSNorm
// So y, rstd and h have the bits of the unfused add followed by tigon::rms_norm_fwd.
//
// Backward, given dy (y's dtype) and dh (T, the gradient of the h output, e.g. the next layer's
// residual branch):
//     g  = RMSNorm's dx formula applied to dy and h, rounded to T (as rms_norm_bwd returns it)
//     dx = round_T(dh + g)            autograd's sum of h's two gradients, in T
//     dw = RMSNorm's dw (deterministic: bitwise identical run to run, for any thread count)
// The gradient of residual is dx as well (the add passes it through). So dx and dw have the
// bits of the unfused composition's backward. dx may alias dh or dy (same data and layout; dy
// only when its dtype is T): the in-place modes that save the dx buffer.
#pragma once

#include <cstddef>

#include "tigon/ops/rms_norm.h"
#include "tigon/tensor.h"

namespace tigon {

// Scratch bytes fused_add_rms_norm_fwd needs (0 on the CPU; on CUDA, RMSNorm's: always ask).
std::size_t fused_add_rms_norm_fwd_workspace_size(const RmsNormParams& params, const TensorView& x,
                                                  const TensorView& weight);

// y's dtype is rms_norm_output_dtype(params, x.dtype, weight.dtype, weight.defined()).
void fused_add_rms_norm_fwd(const RmsNormParams& params, const TensorView& x,
                            const TensorView& residual, const TensorView& weight,
                            const TensorView& h, const TensorView& y, const TensorView& rstd,
                            Workspace workspace = {}, Stream stream = {});

// Scratch bytes fused_add_rms_norm_bwd needs (float32 dW partials, as RMSNorm's).
std::size_t fused_add_rms_norm_bwd_workspace_size(const RmsNormParams& params, const TensorView& h,
                                                  const TensorView& weight);

// h and rstd are the forward's outputs. dx has h's shape and dtype; dw is [H] in the weight's
// dtype (ignored without a weight; zeros with zero rows).
void fused_add_rms_norm_bwd(const RmsNormParams& params, const TensorView& dy, const TensorView& dh,
                            const TensorView& h, const TensorView& weight, const TensorView& rstd,
                            const TensorView& dx, const TensorView& dw, Workspace workspace,
                            Stream stream = {});

}  // namespace tigon
