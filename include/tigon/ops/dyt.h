// DyT (Dynamic Tanh, Zhu et al. 2025), a normalization-free replacement of LayerNorm:
//     y = gamma * tanh(alpha * x) + beta          over the last dimension
//
// Shapes: x is [..., H] (R rows), unit stride in the last dimension, leading dimensions that
// collapse to one row stride; y has x's shape and dtype and its own row stride. alpha is a
// one-element tensor (a learnable scalar, any shape of one element); gamma is [H]; beta is [H] or
// absent (data == nullptr: 0). Each parameter is in x's dtype or float32, independently.
//
// Where each rounding happens (the peer's kernel: everything float32, one rounding at the end).
// T = x's dtype; every operation not marked round_ is float32, none contracted into an FMA:
//     t = tanh(alpha * x)
//     y = round_T(gamma * t + beta)
// Eager PyTorch in a 16-bit dtype rounds after each of the four operations instead; tigon's y is
// closer to the exact value (the peer's choice). tanh is math/activations.h's act_tanh: CUDA's
// tanhf on the device (torch.tanh's on CUDA), tigon's own tanh_f32 on the CPU (+, -, *, / only,
// within about an ulp, independent of the C library); the two differ by float32 ulps on a few
// values, so the backends' y and dx agree within a rounding of T (most elements bit for bit).
//
// Backward, all float32, with u = (1 - t * t) * dy * gamma:
//     dx     = round_T(alpha * u)
//     dgamma = round(sum over rows of dy * t)        in gamma's dtype
//     dbeta  = round(sum over rows of dy)            in beta's dtype (only with beta)
//     dalpha = round(sum over all elements of x * u) in alpha's dtype
// The sums have a fixed order (bitwise identical run to run, for any thread count): dgamma and
// dbeta accumulate float32 partials per fixed chunk of rows, added in chunk order; dalpha adds each
// row's float32 sum into its chunk's float64 total (a sum over every element of the batch), the
// chunks in order. dx may alias dy (same data and layout): the in-place mode.
#pragma once

#include <cstddef>

#include "tigon/tensor.h"

namespace tigon {

// Scratch bytes dyt_bwd needs (float32 and float64 partials), a function of the shapes only.
std::size_t dyt_bwd_workspace_size(const TensorView& x, bool has_beta);

void dyt_fwd(const TensorView& x, const TensorView& alpha, const TensorView& gamma,
             const TensorView& beta, const TensorView& y, Workspace workspace = {},
             Stream stream = {});

// dy has x's shape and dtype; dx too (it may be dy itself); dalpha has alpha's shape and dtype,
// dgamma gamma's; dbeta beta's, ignored without beta. With zero rows the gradients are zeros.
void dyt_bwd(const TensorView& dy, const TensorView& x, const TensorView& alpha,
             const TensorView& gamma, const TensorView& beta, const TensorView& dx,
             const TensorView& dalpha, const TensorView& dgamma, const TensorView& dbeta,
             Workspace workspace, Stream stream = {});

}  // namespace tigon
