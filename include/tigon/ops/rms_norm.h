// RMSNorm: y = (x * rstd) * (offset + w), rstd = 1 / sqrt(mean(x^2) + eps) over the last dim.
//
// Shapes: x is [..., H] with any number of leading dimensions (R = their product rows). The last
// dimension must have unit stride; the leading dimensions must collapse to one row stride (any
// contiguous tensor, or a row-strided view such as a slice of a wider buffer). y has x's shape and
// its own row stride. weight is [H] and contiguous, or absent (data == nullptr: no affine).
// rstd is [R] float32, contiguous: saved for the backward.
//
// Where each rounding happens. T = x's dtype, Tw = weight's dtype, round_U = round to nearest
// even to U; every operation not marked round_ is float32.
//
// kLlama (HF LlamaRMSNorm; Mistral, Qwen2/3, Phi3, ...), y dtype promote(T, Tw):
//     r = 1 / sqrt(sum(x * x) / H + eps)
//     n = round_T(x * r)                      HF: hidden_states.to(input_dtype)
//     y = round_y(n * (offset + w))           HF: weight * n, one rounding in the promoted dtype
// kGemma (HF GemmaRMSNorm; Gemma 1/2/3), y dtype T:
//     r as kLlama;  y = round_T((x * r) * (offset + w))   (offset + w formed in float32)
// kNone (eager PyTorch on tensors of dtype T), y dtype promote(T, Tw):
//     q = round_T(x * x);  v = round_T(round_T(sum(q) / H) + eps);  r = round_T(1 / sqrt(v))
//     n = round_T(x * r);  y = round_y(n * round_Tw(offset + w))
//
// promote(T, Tw) is PyTorch's promotion: equal dtypes stay, otherwise float32 (HF returns float32
// for bf16 activations with float32 master weights). Without a weight, y = round_T(n) and offset
// must be 0. rstd[row] = r (float32; in kNone mode the T-rounded value).
//
// Backward, every mode, all float32, with s = offset + w (as in the forward; 1 without weight),
// n the normalized value the forward multiplied by s, and xhat = x * r unrounded:
//   m    = dy * s
//   dx   = round_T(r * (m - xhat * sum(m * xhat) / H))
//   dw   = round_Tw(sum over rows of dy * n), accumulated in float32 in a fixed order
//          (bitwise identical results run to run, independent of thread or block counts).
// dx may alias dy (same data and layout): the in-place mode that saves the dX buffer.
// The rounding steps through round_T are treated as identity by the gradient, as autograd does.
#pragma once

#include <cstddef>

#include "tigon/tensor.h"

namespace tigon {

enum class CastingMode { kLlama, kGemma, kNone };

const char* casting_mode_name(CastingMode mode) noexcept;

struct RmsNormParams {
  float eps = 1e-6f;    // >= 0
  float offset = 0.0f;  // 1 for Gemma's (1 + w); must be 0 without a weight
  CastingMode casting_mode = CastingMode::kLlama;
};

// The dtype y must have for the given x dtype and weight dtype (has_weight false: no weight).
DType rms_norm_output_dtype(const RmsNormParams& params, DType x_dtype, DType weight_dtype,
                            bool has_weight) noexcept;

// Scratch bytes rms_norm_fwd needs (currently 0 on every backend; always ask).
std::size_t rms_norm_fwd_workspace_size(const RmsNormParams& params, const TensorView& x,
                                        const TensorView& weight);

void rms_norm_fwd(const RmsNormParams& params, const TensorView& x, const TensorView& weight,
                  const TensorView& y, const TensorView& rstd, Workspace workspace = {},
                  Stream stream = {});

// Scratch bytes rms_norm_bwd needs: float32 dW partials, a function of the shapes and device only.
std::size_t rms_norm_bwd_workspace_size(const RmsNormParams& params, const TensorView& x,
                                        const TensorView& weight);

// dy has y's shape and dtype; dx has x's shape and dtype (it may be dy itself when the dtypes
// match); dw is [H] in the weight's dtype (ignored without a weight). With zero rows, dw is zeros.
void rms_norm_bwd(const RmsNormParams& params, const TensorView& dy, const TensorView& x,
                  const TensorView& weight, const TensorView& rstd, const TensorView& dx,
                  const TensorView& dw, Workspace workspace, Stream stream = {});

}  // namespace tigon
