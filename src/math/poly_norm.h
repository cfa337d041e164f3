// PolyNorm formulas, per element and per row. Written once, compiled by g++ for the CPU backend and
// by nvcc for the CUDA backend; the backends only move data and sum. The cast order is the spec
// (include/tigon/ops/poly_norm.h, docs/ops/poly_norm.md). The per-power rstd is RMSNorm's float32
// one (math/rms_norm.h), not a copy of it.
#pragma once

#include <cstdint>

#include "math/float_types.h"
#include "math/host_device.h"
#include "math/rms_norm.h"

namespace tigon::math {

// X: activation storage type (y, dy and dx too). Parameters arrive as float32 values.
template <typename X>
struct PolyNorm {
  // RMSNorm's float32 statistics (Llama mode: the square and 1/sqrtf(sum/H + eps) in float32).
  using Rms = RmsNorm<CastingMode::kLlama, X, X, false>;

  // The powers the three norms normalize: x itself, x^2 and x^3 each rounded to T.
  struct Powers {
    float p1, p2, p3;
  };
  TIGON_HD static Powers powers(float x) { return {x, round_to<X>(x * x), round_to<X>(x * x * x)}; }

  TIGON_HD static float square(float p) { return Rms::square(p); }
  TIGON_HD static float rstd(float sum_of_squares, std::int64_t hidden, float eps) {
    return Rms::rstd(sum_of_squares, hidden, eps);
  }

  // w = {w0, w1, w2} (w0: the cube's), r = {r1, r2, r3} (r1: x's).
  TIGON_HD static X output(const Powers& p, const float* w, const float* r, float b) {
    return from_float<X>(((w[0] * (p.p3 * r[2]) + w[1] * (p.p2 * r[1])) + w[2] * (p.p1 * r[0])) +
                         b);
  }

  // c_k = r_k^3 * S_k / H, S_k = sum(dy * p_k) over the row.
  TIGON_HD static float grad_coefficient(float r, float s, std::int64_t hidden) {
    return r * r * r * s / static_cast<float>(hidden);
  }
  TIGON_HD static X grad_input(float x, float dy, const Powers& p, const float* w, const float* r,
                               const float* c) {
    const float g3 = (3.0f * x * x) * (r[2] * dy - p.p3 * c[2]);
    const float g2 = (2.0f * x) * (r[1] * dy - p.p2 * c[1]);
    const float g1 = r[0] * dy - p.p1 * c[0];
    return from_float<X>((w[0] * g3 + w[1] * g2) + w[2] * g1);
  }
};

}  // namespace tigon::math
