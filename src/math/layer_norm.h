// LayerNorm formulas, per element and per row. Written once, compiled by g++ for the CPU backend
// and by nvcc for the CUDA backend; the backends only move data and sum. The cast order is the
// spec (include/tigon/ops/layer_norm.h, docs/ops/layer_norm.md).
#pragma once

#include <cmath>
#include <cstdint>

#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

// X: activation storage type (y, dy and dx too); W, B: weight and bias storage types.
template <typename X, typename W, typename B>
struct LayerNorm {
  // The row's statistics from its sums: sum(x), then sum((x - mean)^2) around that mean. The
  // divisions are divisions (as PyTorch's mean), and 1/sqrt is two correctly rounded operations,
  // not an approximate rsqrt: both backends give the same bits.
  TIGON_HD static float mean(float sum, std::int64_t hidden) {
    return sum / static_cast<float>(hidden);
  }
  TIGON_HD static float centered_square(float x, float mean) {
    const float d = x - mean;
    return d * d;
  }
  TIGON_HD static float rstd(float sum_of_centered_squares, std::int64_t hidden, float eps) {
    const float variance = sum_of_centered_squares / static_cast<float>(hidden);
    return 1.0f / sqrtf(variance + eps);
  }

  TIGON_HD static float normalized(float x, float mean, float rstd) { return (x - mean) * rstd; }

  // Absent parameters are 1 and 0: multiplying by 1 and adding 0 change no value (-0 + 0 = +0 as
  // in PyTorch, which also adds a 0 bias).
  TIGON_HD static float weight(const W* w, std::int64_t j) { return w ? to_float(w[j]) : 1.0f; }
  TIGON_HD static float bias(const B* b, std::int64_t j) { return b ? to_float(b[j]) : 0.0f; }

  // One rounding, of the float32 result, to x's dtype.
  TIGON_HD static X output(float xhat, float w, float b) { return from_float<X>(xhat * w + b); }

  // Backward. g = dy * w; the row needs sum(g * xhat) and sum(g) before dx can be formed.
  TIGON_HD static float grad_scaled(float dy, float w) { return dy * w; }
  TIGON_HD static X grad_input(float g, float xhat, float rstd, float mean_g_xhat, float mean_g) {
    return from_float<X>(rstd * ((g - mean_g) - xhat * mean_g_xhat));
  }
  TIGON_HD static float grad_weight_term(float dy, float xhat) { return dy * xhat; }
};

}  // namespace tigon::math
