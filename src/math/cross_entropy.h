// Cross-entropy formulas, per element and per row, shared by the CPU and CUDA backends. The spec
// (what is computed, where it rounds) is include/tigon/ops/cross_entropy.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

inline constexpr float kLog2e = 1.4426950408889634f;

// Whether a row with target `y` is left out (no loss, no gradient, not counted in the mean).
TIGON_HD constexpr bool ce_ignored(std::int64_t y, std::int64_t ignore_index) {
  return y == ignore_index;
}

inline constexpr float kLn2 = 0.6931471805599453f;

// 2^x on the host without a library call, so the CPU loops vectorize (exp2f is a call): x split
// into the nearest integer n (by the 1.5 * 2^23 rounding trick, exact for |x| <= 128) and
// f in [-0.5, 0.5]; 2^f = 1 + f P(f) with Cephes exp2f's degree-5 P (relative error about
// 2e-7, 2 ulp); times 2^n built in the exponent bits. Below 2^-126 the result is 0 (as the
// device's .ftz); from 2^128 on, infinity; NaN stays NaN. Plain float operations in a fixed
// order (no FMA contraction on the host), so the same bits on every x86 and Arm build.
inline float host_exp2(float x) {
  x = x < -127.0f ? -127.0f : x;  // 2^-127 -> a zero exponent field: 0
  x = x > 128.0f ? 128.0f : x;    // 2^128 -> the infinity exponent field
  const float r = (x + 12582912.0f) - 12582912.0f;
  const float f = x - r;
  float p = 1.535336188319500e-4f;
  p = p * f + 1.339887440266574e-3f;
  p = p * f + 9.618437357674640e-3f;
  p = p * f + 5.550332471162809e-2f;
  p = p * f + 2.402264791363012e-1f;
  p = p * f + 6.931472028550421e-1f;
  p = p * f + 1.0f;
  const int n = static_cast<int>(r == r ? r : 0.0f);  // NaN: any scale keeps p's NaN
  return p * bits_float(static_cast<std::uint32_t>(n + 127) << 23);
}

// 2^x. Device: the SFU's ex2.approx (relative error ~2^-22; results below 2^-126 flush to 0, which
// only drops probabilities under 1e-38); one instruction where exp2f costs several, and the
// cross-entropy loops evaluate one per element and pass. Host: host_exp2 (same flush, 2 ulp).
TIGON_HD float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return host_exp2(x);
#endif
}

// Running max and sum of exp(c - max) of a row (online softmax), and sum of w_j * c_j for label
// smoothing. Sums are kept in base 2: sum = sum_j 2^((c_j - max) * log2 e). The backends leave
// the target class out of `sum` (see ce_target_terms) but not out of `max`.
struct OnlineLse {
  float max = -INFINITY;
  float sum = 0.0f;
  float weighted_sum = 0.0f;  // sum_j w_j * c_j (only read with label smoothing)

  // Merges another partial state (same row): exact max, sums rescaled to the common max.
  TIGON_HD void merge(const OnlineLse& o) {
    const float m = fmaxf(max, o.max);
    // Both empty (or all -inf): nothing to rescale. fmaxf drops a NaN max, so a NaN logit merged
    // into an empty state must not return here: it goes on and makes the sum NaN (as torch does).
    if (m == -INFINITY && !std::isnan(max) && !std::isnan(o.max)) {
      weighted_sum += o.weighted_sum;
      return;
    }
    sum = sum * fast_exp2((max - m) * kLog2e) + o.sum * fast_exp2((o.max - m) * kLog2e);
    max = m;
    weighted_sum += o.weighted_sum;
  }

  TIGON_HD float lse() const { return max + logf(sum); }
};

// What one row needs to turn logits into loss and gradient; built once per row.
struct CeRow {
  float softcap = 0.0f;      // 0: off
  float inv_softcap = 0.0f;  // 1 / softcap
  float lse = 0.0f;          // of the capped logits
  float lse_log2 = 0.0f;     // lse * log2 e
  float coef_p = 0.0f;       // dc_j = coef_p * p_j - coef_w * w_j - [j == y] * coef_y
  float coef_w = 0.0f;       //   (coef_w multiplies w_j, or 1 without class weights)
  float coef_y = 0.0f;
  float one_minus_p_y = -1.0f;  // 1 - p_y when the forward measured it (>= 0), else unknown
};

// A row's lse and target terms from its online state, where `sum_other` excludes the target
// class: then 1 - p_y = sum_other / total and lse - c_y = log1p(sum_other / e_y) have full
// float32 relative precision even when p_y -> 1 (no cancellation against 1 or against lse).
struct CeTargetTerms {
  float lse;
  float one_minus_p_y;
  float nll;  // lse - c_y
};

TIGON_HD CeTargetTerms ce_target_terms(float max, float sum_other, float c_y) {
  const float e_y = fast_exp2((c_y - max) * kLog2e);
  const float total = sum_other + e_y;
  CeTargetTerms t;
  t.lse = max + logf(total);
  t.one_minus_p_y = sum_other / total;
  t.nll = e_y > 0.0f ? log1pf(sum_other / e_y) : t.lse - c_y;
  return t;
}

// The capped logit c = softcap * tanh(x / softcap) (x itself without a cap).
TIGON_HD float cap_logit(float x, float softcap, float inv_softcap) {
  return softcap > 0.0f ? softcap * tanhf(x * inv_softcap) : x;
}

// d c / d x = 1 - tanh(x / softcap)^2, from c: tanh = c / softcap.
TIGON_HD float cap_derivative(float c, float softcap, float inv_softcap) {
  if (!(softcap > 0.0f)) return 1.0f;
  const float t = c * inv_softcap;
  return 1.0f - t * t;
}

// exp(c - lse) = 2^(c * log2 e - lse * log2 e).
TIGON_HD float softmax_prob(float c, const CeRow& r) { return fast_exp2(c * kLog2e - r.lse_log2); }

// Row coefficients of the gradient, for the scales a (cross-entropy) and b (z-loss) of the
// reduction times the upstream gradient (header formula):
//   dc_j = a (1-ls) w_y (p_j - [j==y]) + a (ls/V) (W p_j - w_j) + b 2 z lse p_j
TIGON_HD CeRow ce_row(float lse, float softcap, float label_smoothing, float lse_square_scale,
                      float w_y, float weight_total, std::int64_t vocab, float a, float b) {
  CeRow r;
  r.softcap = softcap;
  r.inv_softcap = softcap > 0.0f ? 1.0f / softcap : 0.0f;
  r.lse = lse;
  r.lse_log2 = lse * kLog2e;
  const float smooth = label_smoothing / static_cast<float>(vocab);
  r.coef_y = a * (1.0f - label_smoothing) * w_y;
  r.coef_p = r.coef_y + a * smooth * weight_total + b * 2.0f * lse_square_scale * lse;
  r.coef_w = a * smooth;
  return r;
}

// dc_j for a non-target class j (w_j = 1 without class weights).
TIGON_HD float ce_grad(float c, float w_j, const CeRow& r) {
  return r.coef_p * softmax_prob(c, r) - r.coef_w * w_j;
}

// dc_y for the target class: coef_p * p_y - coef_y = coef_y * (p_y - 1) + (coef_p - coef_y) p_y,
// with p_y - 1 in float32 before any rounding: from the forward's sum over the other classes
// when known (exact), else expm1(c_y - lse) (the recompute path; limited by lse's rounding).
TIGON_HD float ce_grad_target(float c, float w_y, const CeRow& r) {
  const float p = softmax_prob(c, r);
  const float p_minus_1 = r.one_minus_p_y >= 0.0f ? -r.one_minus_p_y : expm1f(c - r.lse);
  return r.coef_y * p_minus_1 + (r.coef_p - r.coef_y) * p - r.coef_w * w_y;
}

// ce_i (header formula): (1-ls) w_y nll + (ls/V) (W lse - sum_j w_j c_j), nll = lse - c_y.
TIGON_HD float ce_row_loss(float lse, float nll, float w_y, float weighted_sum, float weight_total,
                           float label_smoothing, std::int64_t vocab) {
  float loss = (1.0f - label_smoothing) * w_y * nll;
  if (label_smoothing != 0.0f) {
    loss += label_smoothing / static_cast<float>(vocab) * (weight_total * lse - weighted_sum);
  }
  return loss;
}

// p_y = exp(c_y - lse), the target's probability: the token scale of use_token_scaling
// (fused_linear_cross_entropy.h), computed as softmax_prob computes p_j.
TIGON_HD float ce_target_prob(float c_y, float lse) {
  return fast_exp2(c_y * kLog2e - lse * kLog2e);
}

// A non-ignored row's token scale t: the caller's factor (1 without one), times p_y with
// use_token_scaling. It multiplies the row's ce and z terms; its gradient's scales a and b are
// multiplied by t * upstream (the upstream gradient when a backward recomputes the rows, else 1)
// before the gradient is rounded (one rounding, as without a scale).
TIGON_HD float ce_token_scale(float given, bool by_target_prob, float c_y, float lse) {
  return by_target_prob ? given * ce_target_prob(c_y, lse) : given;
}

// 1 / d, and 0 when d == 0 (all-ignored batches: 0, not NaN).
TIGON_HD float safe_reciprocal(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Whether class `index` with capped logit `value` precedes the best so far in a row's argmax, as
// torch.argmax orders them: a NaN above every number, the larger value, and among equals (NaNs
// included) the smaller index. A strict total order on (value, index), so partial argmaxes merged
// in any order pick the same class.
template <typename Index>
TIGON_HD bool argmax_better(float value, Index index, float best_value, Index best_index) {
  const bool nan = std::isnan(value), best_nan = std::isnan(best_value);
  if (nan || best_nan) return nan && (!best_nan || index < best_index);
  return value > best_value || (value == best_value && index < best_index);
}

// A part of a row's argmax: its best class so far in argmax_better's order (index: none yet, so
// that any class precedes it).
template <typename Index>
struct Argmax {
  float value = -INFINITY;
  Index index = std::numeric_limits<Index>::max();

  TIGON_HD void add(float v, Index i) {
    if (argmax_better(v, i, value, index)) {
      value = v;
      index = i;
    }
  }
  TIGON_HD void merge(const Argmax& o) { add(o.value, o.index); }
};

// The predicted class of a row for the token accuracy: -1 for an ignored row.
TIGON_HD std::int64_t ce_prediction(std::int64_t argmax, bool ignored) {
  return ignored ? -1 : argmax;
}

// Token accuracy of `hits` correct predictions among `count` non-ignored rows (0 without any).
TIGON_HD float ce_accuracy(double hits, double count) {
  return count != 0.0 ? static_cast<float>(hits / count) : 0.0f;
}

}  // namespace tigon::math
