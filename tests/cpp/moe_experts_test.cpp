// Mixture-of-experts experts CPU backend against a float64 oracle of the documented formula
// (include/tigon/ops/moe_experts.h): the roundings at their points, exact (double) GEMM sums, the
// combine and dhidden in their fixed orders. Every dtype, both weight dtypes, both activations,
// dropped slots, experts without tokens, tiles of more than one GEMM, bitwise run to run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::GluActivation;
using tigon::TensorView;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_at;

struct Case {
  std::int64_t n, k, e, h, i;
  DType dtype;
  bool weights_fp32;  // Mixtral's router (float32 weights) or Qwen3-MoE's (weights in T)
  GluActivation act;
  bool drop;  // some slots routed to E (dropped) and an expert without tokens
};

std::string name(const Case& c) {
  return std::string(tigon::dtype_name(c.dtype)) + (c.weights_fp32 ? "_w32" : "_wT") +
         (c.act == GluActivation::kSilu ? "_silu" : "_gelu") + (c.drop ? "_drop" : "") + "_n" +
         std::to_string(c.n) + "k" + std::to_string(c.k) + "e" + std::to_string(c.e);
}

double act(GluActivation a, double x) {
  if (a == GluActivation::kSilu) return x / (1.0 + std::exp(-x));
  const double kBeta = std::sqrt(2.0 / M_PI), kKappa = 0.044715;
  return 0.5 * x * (1.0 + std::tanh(kBeta * (x + kKappa * x * x * x)));
}

double act_grad(GluActivation a, double x) {
  if (a == GluActivation::kSilu) {
    const double s = 1.0 / (1.0 + std::exp(-x));
    return s * (1.0 + x * (1.0 - s));
  }
  const double kBeta = std::sqrt(2.0 / M_PI), kKappa = 0.044715;
  const double t = std::tanh(kBeta * (x + kKappa * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kBeta * (1.0 + 3.0 * kKappa * x * x);
}

// The op's inputs, its outputs and gradients, and the oracle's.
struct Problem {
  Case c;
  DType wdt;
  HostTensor hidden, weights, w1, w2, dout;
  std::vector<std::int64_t> ids;

  explicit Problem(const Case& cs)
      : c(cs),
        wdt(cs.weights_fp32 ? DType::kFloat32 : cs.dtype),
        hidden(cs.dtype, {cs.n, cs.h}),
        weights(wdt, {cs.n, cs.k}),
        w1(cs.dtype, {cs.e, 2 * cs.i, cs.h}),
        w2(cs.dtype, {cs.e, cs.h, cs.i}),
        dout(cs.dtype, {cs.n, cs.h}),
        ids(static_cast<std::size_t>(cs.n * cs.k)) {
    std::mt19937 rng(1234 + static_cast<unsigned>(cs.n * 7 + cs.e));
    hidden.fill_normal(rng);
    w1.fill_normal(rng, 0.0f, 1.0f / std::sqrt(static_cast<float>(cs.h)));
    w2.fill_normal(rng, 0.0f, 1.0f / std::sqrt(static_cast<float>(cs.i)));
    dout.fill_normal(rng);
    std::uniform_real_distribution<float> wd(0.05f, 1.0f);
    // Distinct experts per token, as top-k gives; with `drop`, expert 1 gets none and about one
    // slot in five is dropped (id E).
    std::vector<std::int64_t> pool;
    for (std::int64_t e = 0; e < cs.e; ++e)
      if (!(cs.drop && e == 1)) pool.push_back(e);
    for (std::int64_t t = 0; t < cs.n; ++t) {
      std::shuffle(pool.begin(), pool.end(), rng);
      for (std::int64_t k = 0; k < cs.k; ++k) {
        const bool dropped = cs.drop && rng() % 5 == 0;
        ids[t * cs.k + k] = dropped ? cs.e : pool[k];
        weights.set(t, k, wd(rng));
      }
    }
  }

  TensorView ids_view() { return TensorView::contiguous(ids.data(), DType::kInt64, {c.n, c.k}); }
  TensorView w1_view() {
    TensorView v = w1.view();
    v.ndim = 3;
    v.sizes[0] = c.e, v.sizes[1] = 2 * c.i, v.sizes[2] = c.h;
    v.strides[0] = 2 * c.i * c.h, v.strides[1] = c.h, v.strides[2] = 1;
    return v;
  }
  TensorView w2_view() {
    TensorView v = w2.view();
    v.ndim = 3;
    v.sizes[0] = c.e, v.sizes[1] = c.h, v.sizes[2] = c.i;
    v.strides[0] = c.h * c.i, v.strides[1] = c.i, v.strides[2] = 1;
    return v;
  }
  tigon::MoeExpertsInputs inputs() {
    return {hidden.view(), ids_view(), weights.view(), w1_view(), w2_view()};
  }
};

// What the op produces.
struct OpResults {
  std::vector<std::int64_t> offsets, sorted;
  HostTensor out, saved_a, saved_d, dhidden, dweights, dw1, dw2;
  OpResults(const Problem& p, DType grad_w_dtype)
      : offsets(static_cast<std::size_t>(p.c.e + 1)),
        sorted(static_cast<std::size_t>(p.c.n * p.c.k)),
        out(p.c.dtype, {p.c.n, p.c.h}),
        saved_a(p.c.dtype, {p.c.n * p.c.k, 2 * p.c.i}),
        saved_d(p.c.dtype, {p.c.n * p.c.k, p.c.h}),
        dhidden(p.c.dtype, {p.c.n, p.c.h}),
        dweights(p.wdt, {p.c.n, p.c.k}),
        dw1(grad_w_dtype, {p.c.e * 2 * p.c.i, p.c.h}),
        dw2(grad_w_dtype, {p.c.e * p.c.h, p.c.i}) {}
};

TensorView as3(TensorView v, std::int64_t a, std::int64_t b, std::int64_t c) {
  v.ndim = 3;
  v.sizes[0] = a, v.sizes[1] = b, v.sizes[2] = c;
  v.strides[0] = b * c, v.strides[1] = c, v.strides[2] = 1;
  return v;
}

void run_op(Problem& p, OpResults& r, tigon::MoeExpertsParams params) {
  const tigon::MoeExpertsInputs in = p.inputs();
  const tigon::MoeExpertsRouting routing{
      TensorView::contiguous(r.offsets.data(), DType::kInt64, {p.c.e + 1}),
      TensorView::contiguous(r.sorted.data(), DType::kInt64, {p.c.n * p.c.k})};
  const tigon::MoeExpertsSaved saved{r.saved_a.view(), r.saved_d.view()};
  std::vector<unsigned char> ws(tigon::moe_experts_fwd_workspace_size(params, in, true));
  tigon::moe_experts_fwd(params, in, routing, saved, r.out.view(), {ws.data(), ws.size()});
  const tigon::MoeExpertsGrads grads{r.dhidden.view(), r.dweights.view(),
                                     as3(r.dw1.view(), p.c.e, 2 * p.c.i, p.c.h),
                                     as3(r.dw2.view(), p.c.e, p.c.h, p.c.i)};
  ws.assign(tigon::moe_experts_bwd_workspace_size(params, in, grads), 0);
  tigon::moe_experts_bwd(params, in, routing, saved, p.dout.view(), grads, {ws.data(), ws.size()});
}

// The float64 oracle: every rounding of the header at its point, exact sums.
struct Oracle {
  std::vector<double> out, dhidden, dweights, dw1, dw2;
};

Oracle oracle(Problem& p, DType grad_w_dtype) {
  const Case& c = p.c;
  const DType t = c.dtype, w = p.wdt, pd = w == t ? t : DType::kFloat32;
  const auto rt = [&](double v) { return round_to(t, v); };
  Oracle o;
  o.out.assign(c.n * c.h, 0.0);
  o.dhidden.assign(c.n * c.h, 0.0);
  o.dweights.assign(c.n * c.k, 0.0);
  o.dw1.assign(c.e * 2 * c.i * c.h, 0.0);
  o.dw2.assign(c.e * c.h * c.i, 0.0);
  std::vector<std::vector<double>> dx_slot(c.n * c.k);
  for (std::int64_t tok = 0; tok < c.n; ++tok) {
    for (std::int64_t k = 0; k < c.k; ++k) {
      const std::int64_t e = p.ids[tok * c.k + k];
      if (e == c.e) continue;
      std::vector<double> a(2 * c.i), y(c.i), hact(c.i), d(c.h);
      for (std::int64_t r = 0; r < 2 * c.i; ++r) {
        double s = 0;
        for (std::int64_t q = 0; q < c.h; ++q)
          s += p.hidden.get(tok, q) * p.w1.get(e * 2 * c.i + r, q);
        a[r] = rt(s);
      }
      for (std::int64_t r = 0; r < c.i; ++r) {
        hact[r] = rt(act(c.act, a[r]));
        y[r] = rt(hact[r] * a[c.i + r]);
      }
      for (std::int64_t q = 0; q < c.h; ++q) {
        double s = 0;
        for (std::int64_t r = 0; r < c.i; ++r) s += y[r] * p.w2.get(e * c.h + q, r);
        d[q] = rt(s);
      }
      const double wt = p.weights.get(tok, k);
      // backward
      std::vector<double> dd(c.h), dy(c.i), da(2 * c.i), dx(c.h);
      double dwsum = 0;
      for (std::int64_t q = 0; q < c.h; ++q) {
        const double g = p.dout.get(tok, q);
        dd[q] = rt(g * wt);
        dwsum += round_to(pd, g * d[q]);
      }
      o.dweights[tok * c.k + k] = round_to(w, dwsum);
      for (std::int64_t r = 0; r < c.i; ++r) {
        double s = 0;
        for (std::int64_t q = 0; q < c.h; ++q) s += dd[q] * p.w2.get(e * c.h + q, r);
        dy[r] = rt(s);
        const double g = rt(dy[r] * a[c.i + r]);
        da[c.i + r] = rt(dy[r] * hact[r]);
        da[r] = rt(g * act_grad(c.act, a[r]));
      }
      for (std::int64_t q = 0; q < c.h; ++q) {
        double s = 0;
        for (std::int64_t r = 0; r < 2 * c.i; ++r) s += da[r] * p.w1.get(e * 2 * c.i + r, q);
        dx[q] = rt(s);
      }
      dx_slot[tok * c.k + k] = dx;
      for (std::int64_t q = 0; q < c.h; ++q)
        for (std::int64_t r = 0; r < c.i; ++r) o.dw2[(e * c.h + q) * c.i + r] += dd[q] * y[r];
      for (std::int64_t r = 0; r < 2 * c.i; ++r)
        for (std::int64_t q = 0; q < c.h; ++q)
          o.dw1[(e * 2 * c.i + r) * c.h + q] += da[r] * p.hidden.get(tok, q);
      // the forward's contribution, kept for the ordered combine
      dx_slot[tok * c.k + k].insert(dx_slot[tok * c.k + k].end(), d.begin(), d.end());
    }
    // combine ascending by expert, dhidden descending, in T
    std::vector<std::int64_t> ks;
    for (std::int64_t k = 0; k < c.k; ++k)
      if (p.ids[tok * c.k + k] != c.e) ks.push_back(k);
    std::sort(ks.begin(), ks.end(), [&](std::int64_t x, std::int64_t z) {
      return std::tie(p.ids[tok * c.k + x], x) < std::tie(p.ids[tok * c.k + z], z);
    });
    for (const std::int64_t k : ks) {
      const std::vector<double>& v = dx_slot[tok * c.k + k];
      const double wt = p.weights.get(tok, k);
      for (std::int64_t q = 0; q < c.h; ++q)
        o.out[tok * c.h + q] = rt(o.out[tok * c.h + q] + rt(round_to(pd, v[c.h + q] * wt)));
    }
    for (auto it = ks.rbegin(); it != ks.rend(); ++it) {
      const std::vector<double>& v = dx_slot[tok * c.k + *it];
      for (std::int64_t q = 0; q < c.h; ++q)
        o.dhidden[tok * c.h + q] = rt(o.dhidden[tok * c.h + q] + v[q]);
    }
  }
  for (double& v : o.dw1) v = round_to(grad_w_dtype, v);
  for (double& v : o.dw2) v = round_to(grad_w_dtype, v);
  return o;
}

// got vs want: |got - want| <= ulps * ulp(dtype, scale) + rel * |want|; `exact_share` of the
// elements bitwise equal (16-bit results, whose float32 sums rarely round differently).
void expect_close(const char* what, const HostTensor& got, const std::vector<double>& want,
                  std::int64_t cols, DType dtype, double min_exact_share) {
  double scale = 0;
  for (const double v : want) scale = std::max(scale, std::fabs(v));
  const double rel = dtype == DType::kFloat32 ? 2e-5 : 0.0;
  const double atol = dtype == DType::kFloat32 ? 2e-5 * scale : 2 * ulp_at(dtype, scale);
  std::int64_t exact = 0, bad = 0;
  double worst = 0;
  for (std::size_t j = 0; j < want.size(); ++j) {
    const double g =
        got.get(static_cast<std::int64_t>(j) / cols, static_cast<std::int64_t>(j) % cols);
    const double diff = std::fabs(g - want[j]);
    exact += diff == 0;
    worst = std::max(worst, diff);
    if (diff > atol + rel * std::fabs(want[j])) {
      if (++bad <= 3)
        ADD_FAILURE() << what << "[" << j << "]: expected " << want[j] << ", got " << g
                      << " (tolerance " << atol + rel * std::fabs(want[j]) << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " beyond tolerance";
  const double share = want.empty() ? 1.0 : static_cast<double>(exact) / want.size();
  EXPECT_GE(share, min_exact_share) << what << ": bitwise equal " << share << ", worst " << worst;
}

class MoeExpertsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(MoeExpertsCpu, MatchesFloat64OracleAndIsDeterministic) {
  const Case c = GetParam();
  Problem p(c);
  const DType gw = c.dtype;
  OpResults r(p, gw);
  run_op(p, r, {c.act});
  const Oracle o = oracle(p, gw);
  const bool narrow = c.dtype != DType::kFloat32;
  expect_close("out", r.out, o.out, c.h, c.dtype, narrow ? 0.95 : 0.0);
  expect_close("grad_hidden", r.dhidden, o.dhidden, c.h, c.dtype, narrow ? 0.9 : 0.0);
  expect_close("grad_topk_weights", r.dweights, o.dweights, c.k, p.wdt, 0.0);
  expect_close("grad_w_gate_up", r.dw1, o.dw1, c.h, gw, narrow ? 0.9 : 0.0);
  expect_close("grad_w_down", r.dw2, o.dw2, c.i, gw, narrow ? 0.9 : 0.0);

  // routing: slots sorted by (expert, slot), offsets by expert, dropped slots last
  std::int64_t j = 0;
  for (std::int64_t e = 0; e <= c.e; ++e) {
    if (e < c.e) ASSERT_EQ(r.offsets[e], j) << "expert_offsets[" << e << "]";
    for (std::int64_t s = 0; s < c.n * c.k; ++s)
      if (p.ids[s] == e) ASSERT_EQ(r.sorted[j++], s) << "sorted_slots[" << j - 1 << "]";
  }
  ASSERT_EQ(j, c.n * c.k);

  // run to run: the same bits
  OpResults again(p, gw);
  run_op(p, again, {c.act});
  for (std::int64_t s = 0; s < c.n; ++s)
    for (std::int64_t q = 0; q < c.h; ++q) {
      ASSERT_EQ(r.out.bits(s, q), again.out.bits(s, q)) << "out not deterministic";
      ASSERT_EQ(r.dhidden.bits(s, q), again.dhidden.bits(s, q)) << "dhidden not deterministic";
    }
  for (std::int64_t s = 0; s < c.e * 2 * c.i; ++s)
    for (std::int64_t q = 0; q < c.h; ++q)
      ASSERT_EQ(r.dw1.bits(s, q), again.dw1.bits(s, q)) << "dw_gate_up not deterministic";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeExpertsCpu,
    ::testing::Values(Case{37, 2, 5, 24, 12, DType::kFloat32, true, GluActivation::kSilu, false},
                      Case{37, 2, 5, 24, 12, DType::kBFloat16, true, GluActivation::kSilu, false},
                      Case{37, 2, 5, 24, 12, DType::kBFloat16, false, GluActivation::kSilu, true},
                      Case{29, 3, 6, 16, 8, DType::kFloat16, false, GluActivation::kGeluTanh, true},
                      Case{29, 3, 6, 16, 8, DType::kFloat32, true, GluActivation::kGeluTanh, true},
                      // one expert, 300 slots: two GEMM tiles, dW summed across them
                      Case{300, 1, 1, 16, 8, DType::kBFloat16, true, GluActivation::kSilu, false},
                      Case{300, 1, 1, 16, 8, DType::kFloat32, true, GluActivation::kSilu, false},
                      Case{0, 2, 4, 8, 4, DType::kBFloat16, false, GluActivation::kSilu, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

TEST(MoeExpertsCpuGrads, Float32WeightGradsOfA16BitModelAreTheSumsRoundedOnce) {
  const Case c{40, 2, 3, 16, 8, DType::kBFloat16, false, GluActivation::kSilu, false};
  Problem p(c);
  OpResults r(p, DType::kFloat32);
  run_op(p, r, {c.act});
  const Oracle o = oracle(p, DType::kFloat32);
  expect_close("grad_w_gate_up (float32)", r.dw1, o.dw1, c.h, DType::kFloat32, 0.0);
  expect_close("grad_w_down (float32)", r.dw2, o.dw2, c.i, DType::kFloat32, 0.0);
}

}  // namespace
