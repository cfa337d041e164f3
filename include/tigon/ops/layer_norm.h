// LayerNorm (torch.nn.LayerNorm over the last dimension):
//     y = (x - mean) * rstd * w + b,  mean = sum(x) / H,  rstd = 1 / sqrt(var + eps),
//     var = sum((x - mean)^2) / H  (the biased variance).
//
// Shapes: x is [..., H] with any number of leading dimensions (R = their product rows). The last
// dimension must have unit stride; the leading dimensions must collapse to one row stride (any
// contiguous tensor, or a row-strided view such as a slice of a wider buffer). y has x's shape,
// x's dtype and its own row stride. weight and bias are [H] and contiguous, each optional
// (data == nullptr: absent, as 1 and 0), each in x's dtype or float32 (PyTorch's dtypes: the same
// as x, or float32 parameters for 16-bit activations; its CPU kernel wants both in one of them).
// mean and rstd are [R] float32, contiguous: saved for the backward (PyTorch keeps them in
// float32 too; the peer keeps them in x's dtype).
//
// Where each rounding happens. T = x's dtype; every operation not marked round_ is float32, and
// none is contracted into a fused multiply-add:
//     mean = sum(x) / H                              two passes over the row, not Welford:
//     var  = sum((x - mean) * (x - mean)) / H        as accurate, and the same on every backend
//     rstd = 1 / sqrt(var + eps)                     a division and a correctly rounded sqrt
//     xhat = (x - mean) * rstd
//     y    = round_T(xhat * w + b)                   w and b read as float32 (1 and 0 if absent)
// This is PyTorch's float32 CPU kernel ((x + -mean) * rstd * gamma + beta, ATen/native/cpu/
// layer_norm_kernel.cpp) and its CUDA kernels' formula ((x - mean) * rstd * gamma + beta,
// ATen/native/cuda/layer_norm_kernel.cu, where nvcc may fuse). For bf16/fp16 inputs PyTorch's CPU
// kernel computes (x * rstd + (-rstd * mean)) * gamma + beta in float32 and rounds once to T:
// the same value up to float32 rounding, so y agrees bitwise on almost every element (99.97% to
// 99.999% measured) and by at most 1 ulp of T, except where y cancels (|y| far below its terms
// x * rstd * w and b): there both are within float32 rounding of those terms, which can be 2 ulps
// of a tiny y, neither one the closer to float64; and with H = 1 tigon's y is exactly b where
// PyTorch's carries rounding noise. Sums have a fixed order (not PyTorch's): mean and rstd agree
// with PyTorch's to float32 rounding.
//
// Backward, all float32, with g = dy * w (dy without a weight):
//     c1 = sum(g * xhat) / H,  c2 = sum(g) / H
//     dx = round_T(rstd * ((g - c2) - xhat * c1))
//     dw = round_Tw(sum over rows of dy * xhat),  db = round_Tb(sum over rows of dy)
// dw and db are accumulated in float32 in a fixed order: per-row-group partials, then the groups
// in order (bitwise identical results run to run, independent of thread or block counts).
// PyTorch's CPU backward forms dx as a*g + b*x + c (cancellation when |mean| >> std) and
// accumulates dw/db per thread in T; this form is never farther from the float64 result.
// dx may alias dy (same data and layout): the in-place mode that saves the dX buffer.
#pragma once

#include <cstddef>

#include "tigon/tensor.h"

namespace tigon {

struct LayerNormParams {
  float eps = 1e-5f;  // >= 0
};

// Scratch bytes layer_norm_fwd needs (currently 0 on every backend; always ask).
std::size_t layer_norm_fwd_workspace_size(const LayerNormParams& params, const TensorView& x);

void layer_norm_fwd(const LayerNormParams& params, const TensorView& x, const TensorView& weight,
                    const TensorView& bias, const TensorView& y, const TensorView& mean,
                    const TensorView& rstd, Workspace workspace = {}, Stream stream = {});

// Scratch bytes layer_norm_bwd needs: float32 dW and dB partials, a function of the shapes, of
// which gradients are asked for and of the device only.
std::size_t layer_norm_bwd_workspace_size(const LayerNormParams& params, const TensorView& x,
                                          bool wants_dw, bool wants_db);

// dy and dx have x's shape and dtype (dx may be dy itself). dw is [H] in the weight's dtype and
// must be given exactly when there is a weight. db is [H] in x's dtype or float32 (the bias's),
// optional: absent, no dB is computed. With zero rows, dw and db are zeros.
void layer_norm_bwd(const LayerNormParams& params, const TensorView& dy, const TensorView& x,
                    const TensorView& weight, const TensorView& mean, const TensorView& rstd,
                    const TensorView& dx, const TensorView& dw, const TensorView& db,
                    Workspace workspace, Stream stream = {});

}  // namespace tigon
