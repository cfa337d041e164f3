// RMSNorm formulas, per element and per row, for every casting mode. Written once, compiled by
// g++ for the CPU backend and by nvcc for the CUDA backend; the backends only move data and sum.
// The cast order is the spec (include/tigon/ops/rms_norm.h, docs/ops/rms_norm.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "math/float_types.h"
#include "math/host_device.h"
#include "tigon/ops/rms_norm.h"

namespace tigon::math {

// X: activation storage type, W: weight storage type (X when there is no weight).
template <CastingMode kMode, typename X, typename W, bool kAffine>
struct RmsNorm {
  // y's storage type: Gemma rounds once to x's type, Llama and eager PyTorch promote (x, w).
  using Y = std::conditional_t<kMode == CastingMode::kGemma || !kAffine, X, Promote<X, W>>;

  // One element's contribution to the row's sum of squares.
  TIGON_HD static float square(float x) {
    if constexpr (kMode == CastingMode::kNone) return round_to<X>(x * x);  // x.pow(2) in T
    return x * x;
  }

  // 1/sqrt(mean + eps). sum/H is a division (as PyTorch's CPU mean does), and 1/sqrt is two
  // correctly rounded operations, not an approximate rsqrt: both backends give the same bits.
  TIGON_HD static float rstd(float sum_of_squares, std::int64_t hidden, float eps) {
    const float mean = sum_of_squares / static_cast<float>(hidden);
    if constexpr (kMode == CastingMode::kNone) {
      const float variance = round_to<X>(round_to<X>(mean) + eps);
      return round_to<X>(1.0f / sqrtf(variance));
    }
    return 1.0f / sqrtf(mean + eps);
  }

  // The normalized value the forward multiplies by the scale; dW accumulates dy against it.
  TIGON_HD static float normalized(float x, float r) {
    if constexpr (kMode == CastingMode::kGemma) return x * r;  // stays float32 until the end
    return round_to<X>(x * r);                                 // Llama: hidden.to(input_dtype)
  }

  // offset + w: float32 in Llama and Gemma mode (Gemma's 1 + w.float()), w's dtype in eager mode.
  TIGON_HD static float scale(W w, float offset) {
    if constexpr (!kAffine) {
      return 1.0f;
    } else if constexpr (kMode == CastingMode::kNone) {
      return round_to<W>(offset + to_float(w));
    } else {
      return offset + to_float(w);
    }
  }

  // A single rounding of the float32 product: for Llama this equals HF's `w * n` in the promoted
  // dtype, because the product of two 16-bit values is exact in float32.
  TIGON_HD static Y output(float n, float s) { return from_float<Y>(n * s); }

  // Backward. m = dy * s; the row needs sum(m * xhat) with xhat = x * r before dx can be formed.
  TIGON_HD static float grad_scaled(float dy, float s) { return dy * s; }
  TIGON_HD static float grad_input(float m, float xhat, float r, float mean_m_xhat) {
    return r * (m - xhat * mean_m_xhat);
  }
  TIGON_HD static float grad_weight_term(float dy, float x, float r) {
    return dy * normalized(x, r);
  }
};

}  // namespace tigon::math
