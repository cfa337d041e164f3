// PolyNorm (PolyCom, Zhuo et al. 2024), the peer's definition (Liger-Kernel ops/poly_norm.py):
//     y = w0 * norm(x^3) + w1 * norm(x^2) + w2 * norm(x) + b      over the last dimension
//     norm(u) = u / sqrt(mean(u^2) + eps)
//
// eps: finite, >= 0 (the peer's default 1e-6), used as float32.
// Shapes: x is [..., H] (R rows), unit stride in the last dimension, leading dimensions that
// collapse to one row stride; y has x's shape and dtype and its own row stride. weight is [3]
// (w0 multiplies the cube); bias is a one-element tensor (a learnable scalar, any shape of one
// element). Each parameter is in x's dtype or float32, independently.
//
// Where each rounding happens. T = x's dtype; every operation not marked round_ is float32, none
// contracted into an FMA. The powers are rounded to T, as the peer's forward (which runs in x's
// dtype) and the eager reference (x**2, x**3 in T) form them; from there on everything stays
// float32, one rounding at the end:
//     p1 = x,  p2 = round_T(x * x),  p3 = round_T(x * x * x)
//     r_k = 1 / sqrtf(sum_j(p_k * p_k) / H + eps)      (RMSNorm's float32 rstd, k = 1, 2, 3)
//     y = round_T(((w0 * (p3 * r3) + w1 * (p2 * r2)) + w2 * (p1 * r1)) + b)
// The peer's Triton forward rounds every product and its row sums to T (bf16 accumulation);
// tigon's y is closer to the exact value. The row sums have a fixed order (bitwise identical run
// to run). The r_k are recomputed by the backward, not saved.
//
// Backward, all float32, from the same p_k and r_k, with S_k = sum_j(dy * p_k) per row and
// c_k = r_k^3 * S_k / H:
//     g3 = (3 * x * x) * (r3 * dy - p3 * c3)
//     g2 = (2 * x) * (r2 * dy - p2 * c2)
//     g1 = r1 * dy - p1 * c1
//     dx = round_T((w0 * g3 + w1 * g2) + w2 * g1)
//     dweight = round({sum over rows of r3 * S3, ... of r2 * S2, ... of r1 * S1})  weight's dtype
//     dbias   = round(sum over all elements of dy)                               bias's dtype
// The roundings to T are identity for the gradient, as autograd treats them. Each row's float32
// r_k * S_k (and its float32 sum of dy) goes into its chunk's float64 total, the chunks of rows in
// order: bitwise identical run to run, for any thread count. dx may alias dy (same data and
// layout): the in-place mode.
#pragma once

#include <cstddef>

#include "tigon/tensor.h"

namespace tigon {

// Scratch bytes poly_norm_bwd needs (float64 partials), a function of the shapes only.
std::size_t poly_norm_bwd_workspace_size(const TensorView& x);

void poly_norm_fwd(const TensorView& x, const TensorView& weight, const TensorView& bias,
                   const TensorView& y, float eps, Workspace workspace = {}, Stream stream = {});

// dy has x's shape and dtype; dx too (it may be dy itself); dweight has weight's shape and dtype,
// dbias bias's. With zero rows the gradients are zeros.
void poly_norm_bwd(const TensorView& dy, const TensorView& x, const TensorView& weight,
                   const TensorView& bias, const TensorView& dx, const TensorView& dweight,
                   const TensorView& dbias, float eps, Workspace workspace, Stream stream = {});

}  // namespace tigon
