// Cross-entropy CPU backend: the product for CPU training and the oracle the CUDA backend is
// tested against. Rows run in parallel; each row is read once for its max and again (from cache)
// for the sum of exponentials and for the gradient, in vectorizable loops (16 lanes merged in a
// fixed order, host_exp2; compiled with -fno-trapping-math, src/CMakeLists.txt), once per x86
// ISA level (row_step).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dispatch.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/cross_entropy.h"
#include "ops/cross_entropy_args.h"

namespace tigon::cpu {
namespace {

using detail::CeScales;
using detail::CrossEntropyArgs;
using math::to_float;

template <typename W>
float weight_at(const void* weight, std::int64_t j) {
  return to_float(static_cast<const W*>(weight)[j]);
}

float class_weight(const CrossEntropyArgs& a, std::int64_t j) {
  if (a.weight == nullptr) return 1.0f;
  return detail::dispatch_dtype(a.weight_dtype, [&](auto tag) {
    return weight_at<typename decltype(tag)::type>(a.weight, j);
  });
}

bool ignored(const CrossEntropyArgs& a, std::int64_t row) {
  return math::ce_ignored(a.target[row], a.params.ignore_index);
}

// Out-of-range targets cannot raise without a host synchronization: their rows get NaN.
bool target_in_range(const CrossEntropyArgs& a, std::int64_t y) { return y >= 0 && y < a.vocab; }

float row_target_weight(const CrossEntropyArgs& a, std::int64_t row) {
  const std::int64_t y = a.target[row];
  return target_in_range(a, y) ? class_weight(a, y) : std::numeric_limits<float>::quiet_NaN();
}

// The upstream gradient of `row` (1 when there is none: the forward's gradient).
float upstream(const CrossEntropyArgs& a, std::int64_t row) {
  if (a.grad_loss == nullptr) return 1.0f;
  return a.grad_loss[a.params.reduction == Reduction::kNone ? row : 0];
}

float weight_total(const CrossEntropyArgs& a) {
  if (a.weight == nullptr) return static_cast<float>(a.vocab);
  return lane_sum(a.vocab, [&](std::int64_t j) { return class_weight(a, j); });
}

// A row's online state, and with kArgmax its argmax, from one pass over the row.
struct RowState {
  math::OnlineLse lse;
  math::Argmax<std::int64_t> best;
};

// The max of n values in kLanes lanes (vectorizable; a NaN never wins, so it reaches the sum).
template <typename Value>
float lane_max(std::int64_t n, Value&& value) {
  float m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = -INFINITY;
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float c = value(j + l);
      m[l] = c > m[l] ? c : m[l];
    }
  }
  for (int l = 0; j + l < n; ++l) m[0] = value(j + l) > m[0] ? value(j + l) : m[0];
  float best = m[0];
  for (int l = 1; l < kLanes; ++l) best = m[l] > best ? m[l] : best;
  return best;
}

// A row's state from two passes over it: the max, then the sum of 2^((c_j - max) log2 e) over the
// classes other than y (lane_sum's fixed order; an all -inf row sums relative to 0: 0, NaN
// stays NaN); and with kArgmax its argmax. Without a softcap the capped logit is the logit.
template <typename T, bool kArgmax>
RowState row_state(const CrossEntropyArgs& a, const T* x, std::int64_t y) {
  const float softcap = a.params.softcap;
  const float inv = softcap > 0.0f ? 1.0f / softcap : 0.0f;
  const std::int64_t v = a.vocab;
  RowState st;
  const auto capped = [&](std::int64_t j) { return math::cap_logit(to_float(x[j]), softcap, inv); };
  const auto plain = [&](std::int64_t j) { return to_float(x[j]); };
  const auto state = [&](auto&& logit) {
    st.lse.max = lane_max(v, logit);
    const float base = st.lse.max == -INFINITY ? 0.0f : st.lse.max;
    st.lse.sum = lane_sum(v, [&](std::int64_t j) {
      const float e = math::fast_exp2((logit(j) - base) * math::kLog2e);
      return j == y ? 0.0f : e;
    });
    if (a.params.label_smoothing != 0.0f) {
      st.lse.weighted_sum =
          lane_sum(v, [&](std::int64_t j) { return class_weight(a, j) * logit(j); });
    }
    if constexpr (kArgmax) {
      for (std::int64_t j = 0; j < v; ++j) st.best.add(logit(j), j);
    }
  };
  if (softcap > 0.0f) {
    state(capped);
  } else {
    state(plain);
  }
  return st;
}

// Writes row `row`'s gradient for the given scales a, b (times any upstream gradient).
template <typename T>
void row_grad(const CrossEntropyArgs& a, std::int64_t row, const T* x, float lse, float wt,
              float scale_a, float scale_b, float one_minus_p_y = -1.0f) {
  T* g = static_cast<T*>(a.grad) + row * a.grad_row_stride;
  const std::int64_t y = a.target[row];
  if (ignored(a, row)) {
    for (std::int64_t j = 0; j < a.vocab; ++j) g[j] = math::from_float<T>(0.0f);
    return;
  }
  const CrossEntropyParams& p = a.params;
  const float w_y = row_target_weight(a, row);
  math::CeRow r = math::ce_row(lse, p.softcap, p.label_smoothing, p.lse_square_scale, w_y, wt,
                               a.vocab, scale_a, scale_b);
  r.one_minus_p_y = one_minus_p_y;
  if (p.softcap == 0.0f && a.weight == nullptr) {
    // The loop below with c = x, w_j = 1 and a cap derivative of 1 (the same bits: coef_w * 1 and
    // dc * 1 are exact), vectorizable; the target's logit is read before g (which may be x) is
    // written.
    const bool has_y = target_in_range(a, y);
    const float c_y = has_y ? to_float(x[y]) : 0.0f;
    for (std::int64_t j = 0; j < a.vocab; ++j) {
      g[j] = math::from_float<T>(r.coef_p * math::softmax_prob(to_float(x[j]), r) - r.coef_w);
    }
    if (has_y) g[y] = math::from_float<T>(math::ce_grad_target(c_y, 1.0f, r));
    return;
  }
  for (std::int64_t j = 0; j < a.vocab; ++j) {
    const float c = math::cap_logit(to_float(x[j]), r.softcap, r.inv_softcap);
    const float w_j = class_weight(a, j);
    const float dc = j == y ? math::ce_grad_target(c, w_j, r) : math::ce_grad(c, w_j, r);
    g[j] = math::from_float<T>(dc * math::cap_derivative(c, r.softcap, r.inv_softcap));
  }
}

template <typename T, bool kArgmax>
void forward_row(const CrossEntropyArgs& a, const CeScales& s, detail::RowTerms terms,
                 std::int64_t row) {
  const float wt = s.weight_total;
  const CrossEntropyParams& p = a.params;
  const T* x = static_cast<const T*>(a.logits) + row * a.logits_row_stride;
  const std::int64_t y = a.target[row];
  const RowState state = row_state<T, kArgmax>(a, x, y);
  const math::OnlineLse& st = state.lse;
  if constexpr (kArgmax) {
    const std::int64_t pred = math::ce_prediction(state.best.index, ignored(a, row));
    if (a.predicted) a.predicted[row] = pred;
    if (a.accuracy) terms.hit[row] = pred == y ? 1.0f : 0.0f;
  }
  float lse = st.lse();
  float ce = 0.0f, z = 0.0f, one_minus_p_y = -1.0f, grad_factor = 1.0f;
  if (!ignored(a, row)) {
    const float w_y = row_target_weight(a, row);
    const float inv = p.softcap > 0.0f ? 1.0f / p.softcap : 0.0f;
    const float c_y = target_in_range(a, y) ? math::cap_logit(to_float(x[y]), p.softcap, inv)
                                            : std::numeric_limits<float>::quiet_NaN();
    const math::CeTargetTerms t = math::ce_target_terms(st.max, st.sum, c_y);
    lse = t.lse;
    one_minus_p_y = t.one_minus_p_y;
    ce = math::ce_row_loss(lse, t.nll, w_y, st.weighted_sum, wt, p.label_smoothing, a.vocab);
    z = p.lse_square_scale * lse * lse;
    const float given = a.token_scale ? a.token_scale[row] : 1.0f;
    const float scale = math::ce_token_scale(given, a.token_scale_by_target_prob, c_y, lse);
    ce *= scale;
    z *= scale;
    grad_factor = scale * upstream(a, row);
  }
  if (a.lse) a.lse[row] = lse;
  terms.ce[row] = ce;
  terms.z[row] = z;
  if (a.grad) {
    row_grad(a, row, x, lse, wt, s.a * grad_factor, s.b * grad_factor, one_minus_p_y);
  }
}

template <typename T>
void backward_row(const CrossEntropyArgs& a, const CeScales& s, std::int64_t row) {
  const T* x = static_cast<const T*>(a.logits) + row * a.logits_row_stride;
  const float g = upstream(a, row);
  row_grad(a, row, x, a.lse[row], s.weight_total, s.a * g, s.b * g);
}

template <typename F>
void dispatch_logits(DType dtype, F&& f) {
  detail::dispatch_dtype(dtype,
                         [&](auto tag) { f.template operator()<typename decltype(tag)::type>(); });
}

// One row of the forward (terms, gradient) or of the backward, compiled once per x86 ISA level
// and chosen at load time (ifunc), everything inlined into each: the 16 lanes and their merge
// order are the source's and host code never contracts into FMAs (-ffp-contract=off), so every
// clone gives the same bits; the wider ones run the loops 8 or 16 floats at a time.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((flatten, target_clones("default", "avx2", "avx512f")))
#endif
void row_step(const CrossEntropyArgs& a, const CeScales& s, detail::RowTerms terms,
              std::int64_t row, bool backward) {
  dispatch_logits(a.logits_dtype, [&]<typename T>() {
    if (backward) {
      backward_row<T>(a, s, row);
    } else if (a.predicts()) {
      forward_row<T, true>(a, s, terms, row);
    } else {
      forward_row<T, false>(a, s, terms, row);
    }
  });
}

void finish(const CrossEntropyArgs& a, const CeScales& s, detail::RowTerms t) {
  if (a.params.reduction == Reduction::kNone) {
    for (std::int64_t i = 0; i < a.rows; ++i) {
      a.loss[i] = t.ce[i] + t.z[i];
      if (a.z_loss) a.z_loss[i] = t.z[i];
      if (a.accuracy) a.accuracy[i] = t.hit[i];
    }
    return;
  }
  // In float64, rounded once: as the denominators (cross_entropy_scales).
  const auto ce_sum =
      static_cast<float>(lane_sum<double>(a.rows, [&](std::int64_t i) { return t.ce[i]; }));
  const auto z_sum =
      static_cast<float>(lane_sum<double>(a.rows, [&](std::int64_t i) { return t.z[i]; }));
  const float z_total = z_sum * s.b;
  a.loss[0] = ce_sum * s.a + z_total;
  if (a.z_loss) a.z_loss[0] = z_total;
  if (a.accuracy) {
    const double hits = lane_sum<double>(a.rows, [&](std::int64_t i) { return t.hit[i]; });
    a.accuracy[0] = math::ce_accuracy(hits, s.count);
  }
}

}  // namespace

std::size_t cross_entropy_workspace_size(const detail::CrossEntropyArgs& a, bool forward) {
  return forward ? static_cast<std::size_t>(3 * a.rows) * sizeof(float) : 0;
}

// The reduction's denominators and scales (header formula). The denominators are summed in
// float64 and rounded once: a float32 running sum of 8192 class weights was 2.1e-6 off (relative),
// and a float32 row count stops at 2^24.
CeScales cross_entropy_scales(const CrossEntropyArgs& a) {
  CeScales s{0.0f, 0.0f, 1.0f, 1.0f, weight_total(a)};
  double weight_sum = 0.0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < a.rows; ++i) {
    if (ignored(a, i)) continue;
    weight_sum += row_target_weight(a, i);
    ++count;
  }
  s.weight_sum = static_cast<float>(weight_sum);
  s.count = static_cast<float>(count);
  if (a.params.reduction == Reduction::kMean) {
    s.a = math::safe_reciprocal(s.weight_sum);
    s.b = math::safe_reciprocal(s.count);
  } else if (a.params.reduction == Reduction::kSum && a.divisor != nullptr) {
    s.a = s.b = math::safe_reciprocal(*a.divisor);
  }
  return s;
}

void cross_entropy_rows(const CrossEntropyArgs& a, const CeScales& s, detail::RowTerms terms) {
  parallel_for(a.rows, 2 * a.vocab,
               [&](std::int64_t row) { row_step(a, s, terms, row, /*backward=*/false); });
}

void cross_entropy_finish(const CrossEntropyArgs& a, const CeScales& s, detail::RowTerms terms) {
  finish(a, s, terms);
}

void cross_entropy_fwd(const detail::CrossEntropyArgs& a) {
  const CeScales s = cross_entropy_scales(a);
  auto* ws = static_cast<float*>(a.workspace);
  const detail::RowTerms terms{ws, ws + a.rows, ws + 2 * a.rows};
  cross_entropy_rows(a, s, terms);
  finish(a, s, terms);
}

void cross_entropy_bwd(const detail::CrossEntropyArgs& a) {
  const CeScales s = cross_entropy_scales(a);
  parallel_for(a.rows, a.vocab, [&](std::int64_t row) { row_step(a, s, {}, row, true); });
}

void cross_entropy_scale_grad(const detail::ScaleGradArgs& a) {
  const float scale = *a.scale;
  if (scale == 1.0f) return;
  dispatch_logits(a.dtype, [&]<typename T>() {
    parallel_for(a.rows, a.vocab, [&](std::int64_t row) {
      T* g = static_cast<T*>(a.grad) + row * a.row_stride;
      for (std::int64_t j = 0; j < a.vocab; ++j) g[j] = math::from_float<T>(to_float(g[j]) * scale);
    });
  });
}

}  // namespace tigon::cpu
