// Per-element formulas of the distillation losses (kl_div, jsd, tvd), shared by the CPU and CUDA
// backends. The spec (what is computed, where it rounds) is include/tigon/ops/divergence.h.
#pragma once

#include <cmath>
#include <cstdint>

#include "math/host_device.h"

namespace tigon::math {

enum class DivergenceKind : std::uint8_t { kKlDiv, kJsd, kTvd };

// One element's loss and its derivative with respect to the input (before any scale).
struct DivergenceTerm {
  float loss;
  float grad;
};

// The options an element needs: log_target (kl_div) or beta (jsd).
struct DivergenceOptions {
  bool log_target = false;
  float beta = 0.5f;
};

// kl_div: t (log t - x) with 0 * (0 - x) at t == 0 (torch's xlogy(t, t) - t x: 0 unless x is
// infinite or NaN), or exp(t) (t - x) with log_target. d/dx: -t or -exp(t).
TIGON_HD DivergenceTerm kl_div_term(float x, float t, bool log_target) {
  if (log_target) {
    const float p = expf(t);
    return {p * (t - x), -p};
  }
  const float log_t = t == 0.0f ? 0.0f : logf(t);
  return {t * (log_t - x), -t};
}

// jsd with x = log Q (student), y = log P (teacher); beta 0 and 1 are the forward and reverse KL.
TIGON_HD DivergenceTerm jsd_term(float x, float y, float beta) {
  if (beta == 0.0f) {
    const float p = expf(y);
    return {p * (y - x), -p};
  }
  const float q = expf(x);
  if (beta == 1.0f) {
    const float loss = q * (x - y);
    return {loss, loss + q};
  }
  const float beta_p = beta * expf(y);
  const float rest_q = (1.0f - beta) * q;
  const float m = beta_p + rest_q;
  const float log_m = logf(m);
  return {beta_p * y + rest_q * x - m * log_m, rest_q * (x - log_m)};
}

// tvd: 0.5 |p - q|, d/dp = +0.5 where p > q, else -0.5 (p == q included, as the peer).
TIGON_HD DivergenceTerm tvd_term(float p, float q) {
  return {0.5f * fabsf(p - q), p > q ? 0.5f : -0.5f};
}

template <DivergenceKind kKind>
TIGON_HD DivergenceTerm divergence_term(float x, float t, const DivergenceOptions& o) {
  if constexpr (kKind == DivergenceKind::kKlDiv) {
    return kl_div_term(x, t, o.log_target);
  } else if constexpr (kKind == DivergenceKind::kJsd) {
    return jsd_term(x, t, o.beta);
  } else {
    return tvd_term(x, t);
  }
}

// The loss S / d, S the float64 sum of the float32 row sums: divided in float64 and rounded
// once; 0 when d == 0 (every row ignored).
TIGON_HD float divergence_reduced(double sum, double denominator) {
  return denominator != 0.0 ? static_cast<float>(sum / denominator) : 0.0f;
}

// The gradient's scale 1 / d of the reduction (rounded to float32 once), 0 when d == 0.
TIGON_HD float divergence_scale(double denominator) {
  return denominator != 0.0 ? static_cast<float>(1.0 / denominator) : 0.0f;
}

}  // namespace tigon::math
