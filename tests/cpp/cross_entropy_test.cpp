// Cross-entropy CPU backend against a float64 oracle of the documented formula: every reduction,
// class weights, label smoothing, z-loss, softcap, ignored and all-ignored rows, the sum divisor,
// fused vs recomputed gradients, in-place gradients, strided rows and the confident true class.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "tigon/tigon.h"

namespace {

using tigon::CrossEntropyInputs;
using tigon::CrossEntropyParams;
using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;

struct Oracle {
  std::vector<double> loss;  // [N] (none) or [1]
  std::vector<double> z;
  std::vector<double> grad;  // [N * V], for upstream 1 (none: per row 1)
};

// The header formula in float64 (ignored rows: 0; zero denominators: 0).
Oracle oracle(const CrossEntropyParams& p, const HostTensor& x, const std::vector<std::int64_t>& y,
              const std::vector<double>* w, double divisor) {
  const std::int64_t n = x.rows(), v = x.hidden();
  const double ls = p.label_smoothing, zs = p.lse_square_scale, cap = p.softcap;
  std::vector<double> ce(n, 0.0), z(n, 0.0), lse(n, 0.0);
  double wsum = 0.0, count = 0.0, wt = 0.0;
  for (std::int64_t j = 0; j < v; ++j) wt += w ? (*w)[j] : 1.0;
  auto capped = [&](std::int64_t i, std::int64_t j) {
    const double xv = x.get(i, j);
    return cap > 0 ? cap * std::tanh(xv / cap) : xv;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (std::int64_t j = 0; j < v; ++j) m = std::max(m, capped(i, j));
    double s = 0.0, wx = 0.0;
    for (std::int64_t j = 0; j < v; ++j) {
      s += std::exp(capped(i, j) - m);
      wx += (w ? (*w)[j] : 1.0) * capped(i, j);
    }
    lse[i] = m + std::log(s);
    if (y[i] == p.ignore_index) continue;
    const double wy = w ? (*w)[y[i]] : 1.0;
    ce[i] = (1 - ls) * wy * (lse[i] - capped(i, y[i])) + ls / v * (wt * lse[i] - wx);
    z[i] = zs * lse[i] * lse[i];
    wsum += wy;
    count += 1;
  }
  double a = 1, b = 1;
  if (p.reduction == Reduction::kMean) {
    a = wsum != 0 ? 1 / wsum : 0;
    b = count != 0 ? 1 / count : 0;
  } else if (p.reduction == Reduction::kSum) {
    a = b = 1 / divisor;
  }
  Oracle o;
  if (p.reduction == Reduction::kNone) {
    for (std::int64_t i = 0; i < n; ++i) {
      o.loss.push_back(ce[i] + z[i]);
      o.z.push_back(z[i]);
    }
  } else {
    double c = 0, zz = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      c += ce[i];
      zz += z[i];
    }
    o.loss.push_back(c * a + zz * b);
    o.z.push_back(zz * b);
  }
  o.grad.assign(n * v, 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    if (y[i] == p.ignore_index) continue;
    const double wy = w ? (*w)[y[i]] : 1.0;
    for (std::int64_t j = 0; j < v; ++j) {
      const double c = capped(i, j);
      const double pj = std::exp(c - lse[i]);
      const double wj = w ? (*w)[j] : 1.0;
      double dc = a * ((1 - ls) * wy * (pj - (j == y[i])) + ls / v * (wt * pj - wj)) +
                  b * 2 * zs * lse[i] * pj;
      if (cap > 0) {
        const double t = std::tanh(static_cast<double>(x.get(i, j)) / cap);
        dc *= 1 - t * t;
      }
      o.grad[i * v + j] = dc;
    }
  }
  return o;
}

TensorView view1d(void* data, DType dtype, std::int64_t n) {
  return TensorView::contiguous(data, dtype, {n});
}

struct CeRun {
  std::vector<float> loss, z, lse;
  HostTensor grad;
  explicit CeRun(DType dtype, std::int64_t n, std::int64_t v) : grad(dtype, {n, v}) {}
};

struct Problem {
  CrossEntropyParams p;
  DType dtype = DType::kFloat32;
  std::int64_t n = 7, v = 37;
  bool weighted = false;
  double divisor = 0;  // > 0: kSum divisor
  int ignored_rows = 2;
  std::uint32_t seed = 1;
};

class CrossEntropy {
 public:
  explicit CrossEntropy(const Problem& pr) : pr_(pr), x_(pr.dtype, {pr.n, pr.v}) {
    std::mt19937 rng(pr.seed);
    x_.fill_normal(rng, 0.0f, 2.0f);
    std::uniform_int_distribution<std::int64_t> cls(0, pr.v - 1);
    for (std::int64_t i = 0; i < pr.n; ++i) y_.push_back(cls(rng));
    for (int k = 0; k < pr.ignored_rows && k < pr.n; ++k)
      y_[(3 * k + 1) % pr.n] = pr.p.ignore_index;
    if (pr.weighted) {
      std::uniform_real_distribution<float> u(0.1f, 2.0f);
      for (std::int64_t j = 0; j < pr.v; ++j) w_.push_back(u(rng));
      for (double wj : w_) w64_.push_back(wj);
    }
    div_ = static_cast<float>(pr.divisor);
  }

  CrossEntropyInputs inputs(const TensorView& logits) {
    CrossEntropyInputs in;
    in.logits = logits;
    in.target = view1d(y_.data(), DType::kInt64, pr_.n);
    if (pr_.weighted) in.weight = view1d(w_.data(), DType::kFloat32, pr_.v);
    if (pr_.divisor > 0) in.divisor = view1d(&div_, DType::kFloat32, 1);
    return in;
  }

  // Forward with the fused gradient (into `grad`, or into the logits when in_place).
  CeRun forward(bool with_grad, bool in_place = false) {
    CeRun r(pr_.dtype, pr_.n, pr_.v);
    const std::int64_t nl = pr_.p.reduction == Reduction::kNone ? pr_.n : 1;
    r.loss.assign(nl, -1.0f);
    r.z.assign(nl, -1.0f);
    r.lse.assign(pr_.n, 0.0f);
    HostTensor x = x_;
    const CrossEntropyInputs in = inputs(x.view());
    std::vector<std::uint8_t> ws(tigon::cross_entropy_fwd_workspace_size(pr_.p, in) + 1);
    TensorView grad = with_grad ? (in_place ? x.view() : r.grad.view()) : TensorView{};
    tigon::cross_entropy_fwd(
        pr_.p, in,
        {view1d(r.loss.data(), DType::kFloat32, nl), view1d(r.z.data(), DType::kFloat32, nl)},
        view1d(r.lse.data(), DType::kFloat32, pr_.n), grad, Workspace{ws.data(), ws.size()});
    if (in_place) r.grad = x;
    return r;
  }

  // Recomputed gradient for the upstream `g` (one value, or one per row for kNone).
  HostTensor backward(const std::vector<float>& lse, std::vector<float> g) {
    HostTensor out(pr_.dtype, {pr_.n, pr_.v});
    const CrossEntropyInputs in = inputs(x_.view());
    std::vector<std::uint8_t> ws(tigon::cross_entropy_bwd_workspace_size(pr_.p, in) + 1);
    std::vector<float> lse_copy = lse;
    tigon::cross_entropy_bwd(pr_.p, in, view1d(lse_copy.data(), DType::kFloat32, pr_.n),
                             view1d(g.data(), DType::kFloat32, static_cast<std::int64_t>(g.size())),
                             out.view(), Workspace{ws.data(), ws.size()});
    return out;
  }

  Oracle expected() const {
    return oracle(pr_.p, x_, y_, pr_.weighted ? &w64_ : nullptr, pr_.divisor > 0 ? pr_.divisor : 1);
  }
  const HostTensor& x() const { return x_; }
  std::vector<std::int64_t>& y() { return y_; }
  HostTensor& mutable_x() { return x_; }

 private:
  Problem pr_;
  HostTensor x_;
  std::vector<std::int64_t> y_;
  std::vector<float> w_;
  std::vector<double> w64_;
  float div_ = 1.0f;
};

// |got - want| <= atol + rtol |want| per element.
void expect_close(const std::vector<double>& want, const std::vector<float>& got, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " [" << i << "]";
  }
}

void expect_grad_close(const Oracle& o, const HostTensor& g, DType dtype, double scale,
                       const std::string& what) {
  // One rounding to the gradient dtype plus float32 softmax error, relative to the row scale.
  const double tol = 4 * epsilon_of(dtype) + 2e-6;
  for (std::int64_t i = 0; i < g.rows(); ++i)
    for (std::int64_t j = 0; j < g.hidden(); ++j) {
      const double want = o.grad[i * g.hidden() + j];
      ASSERT_NEAR(g.get(i, j), want, tol * (std::abs(want) + scale * 1e-3) + 1e-30)
          << what << " row " << i << " col " << j;
    }
}

struct Variant {
  const char* name;
  Reduction reduction;
  float ls, z, cap;
  bool weighted;
  double divisor;
};

class CrossEntropyVariants : public ::testing::TestWithParam<std::tuple<Variant, DType>> {};

TEST_P(CrossEntropyVariants, MatchesFloat64Oracle) {
  const auto [var, dtype] = GetParam();
  Problem pr;
  pr.p.reduction = var.reduction;
  pr.p.label_smoothing = var.ls;
  pr.p.lse_square_scale = var.z;
  pr.p.softcap = var.cap;
  pr.weighted = var.weighted;
  pr.divisor = var.divisor;
  pr.dtype = dtype;
  pr.n = 9;
  pr.v = 133;
  CrossEntropy ce(pr);
  const Oracle o = ce.expected();
  const CeRun fused = ce.forward(true);
  expect_close(o.loss, fused.loss, 1e-5, 1e-5, "loss");
  expect_close(o.z, fused.z, 1e-6, 1e-5, "z_loss");
  const double scale = var.reduction == Reduction::kMean ? 1.0 / pr.n : 1.0;
  expect_grad_close(o, fused.grad, dtype, scale, "fused grad");

  // Forward without gradient: same loss bits; recomputed gradient for upstream 1: the same up to
  // the target class's p_y - 1 (from lse there, see ce_grad_target), within one rounding.
  const CeRun plain = ce.forward(false);
  EXPECT_EQ(plain.loss, fused.loss);
  const std::vector<float> ones(var.reduction == Reduction::kNone ? pr.n : 1, 1.0f);
  const HostTensor recomputed = ce.backward(plain.lse, ones);
  expect_grad_close(o, recomputed, dtype, scale, "recomputed grad");

  // In place: the gradient lands in the logits buffer, bit for bit the same.
  const CeRun inplace = ce.forward(true, true);
  for (std::int64_t i = 0; i < pr.n; ++i)
    for (std::int64_t j = 0; j < pr.v; ++j)
      ASSERT_EQ(inplace.grad.bits(i, j), fused.grad.bits(i, j)) << i << "," << j;
}

const Variant kVariants[] = {
    {"mean", Reduction::kMean, 0, 0, 0, false, 0},
    {"sum", Reduction::kSum, 0, 0, 0, false, 0},
    {"none", Reduction::kNone, 0, 0, 0, false, 0},
    {"sum_divisor", Reduction::kSum, 0, 0, 0, false, 7.0},
    {"mean_weight", Reduction::kMean, 0, 0, 0, true, 0},
    {"mean_weight_smoothing", Reduction::kMean, 0.1f, 0, 0, true, 0},
    {"sum_weight_smoothing", Reduction::kSum, 0.2f, 0, 0, true, 0},
    {"none_weight_smoothing", Reduction::kNone, 0.1f, 0, 0, true, 0},
    {"mean_smoothing", Reduction::kMean, 0.1f, 0, 0, false, 0},
    {"mean_zloss", Reduction::kMean, 0, 1e-4f, 0, false, 0},
    {"mean_weight_zloss", Reduction::kMean, 0, 1e-2f, 0, true, 0},
    {"none_zloss", Reduction::kNone, 0, 1e-3f, 0, false, 0},
    {"mean_softcap", Reduction::kMean, 0, 0, 3.0f, false, 0},
    {"all_options", Reduction::kMean, 0.1f, 1e-3f, 4.0f, true, 0},
    {"all_options_sum", Reduction::kSum, 0.2f, 1e-3f, 4.0f, true, 3.0},
};

INSTANTIATE_TEST_SUITE_P(Cpu, CrossEntropyVariants,
                         ::testing::Combine(::testing::ValuesIn(kVariants),
                                            ::testing::Values(DType::kFloat32, DType::kBFloat16,
                                                              DType::kFloat16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_" +
                                  tigon::dtype_name(std::get<1>(info.param));
                         });

TEST(CrossEntropy, AllIgnoredGivesZeroNotNaN) {
  for (Reduction r : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    Problem pr;
    pr.p.reduction = r;
    pr.p.lse_square_scale = 1e-3f;
    pr.weighted = true;
    CrossEntropy ce(pr);
    for (auto& t : ce.y()) t = pr.p.ignore_index;
    const CeRun run = ce.forward(true);
    for (float l : run.loss) EXPECT_EQ(l, 0.0f);
    for (float l : run.z) EXPECT_EQ(l, 0.0f);
    for (std::int64_t i = 0; i < pr.n; ++i)
      for (std::int64_t j = 0; j < pr.v; ++j) ASSERT_EQ(run.grad.get(i, j), 0.0f);
  }
}

TEST(CrossEntropy, NonUniformUpstreamForReductionNone) {
  Problem pr;
  pr.p.reduction = Reduction::kNone;
  pr.p.label_smoothing = 0.1f;
  pr.weighted = true;
  CrossEntropy ce(pr);
  const Oracle o = ce.expected();
  const CeRun plain = ce.forward(false);
  std::vector<float> g(pr.n);
  for (std::int64_t i = 0; i < pr.n; ++i) g[i] = 0.5f + static_cast<float>(i) * 0.75f - 2.0f;
  const HostTensor grad = ce.backward(plain.lse, g);
  for (std::int64_t i = 0; i < pr.n; ++i)
    for (std::int64_t j = 0; j < pr.v; ++j) {
      const double want = o.grad[i * pr.v + j] * g[i];
      ASSERT_NEAR(grad.get(i, j), want, 1e-5 * std::abs(want) + 1e-9) << i << "," << j;
    }
}

TEST(CrossEntropy, ScaleGradMultipliesAndSkipsOne) {
  Problem pr;
  CrossEntropy ce(pr);
  CeRun run = ce.forward(true);
  HostTensor before = run.grad;
  float one = 1.0f, half = 0.5f;
  tigon::cross_entropy_scale_grad(run.grad.view(), view1d(&one, DType::kFloat32, 1));
  for (std::int64_t i = 0; i < pr.n; ++i)
    for (std::int64_t j = 0; j < pr.v; ++j) ASSERT_EQ(run.grad.bits(i, j), before.bits(i, j));
  tigon::cross_entropy_scale_grad(run.grad.view(), view1d(&half, DType::kFloat32, 1));
  for (std::int64_t i = 0; i < pr.n; ++i)
    for (std::int64_t j = 0; j < pr.v; ++j) ASSERT_EQ(run.grad.get(i, j), before.get(i, j) * 0.5f);
}

// users.md 4: dx_y = p_y - 1 must be formed in float32 before rounding. Drive p_y to 0.9, 0.99,
// 0.999 and compare the bfloat16 gradient of the target class with float64 to one rounding.
TEST(CrossEntropy, ConfidentTargetGradientKeepsPrecision) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    for (double p_y : {0.9, 0.99, 0.999}) {
      Problem pr;
      pr.dtype = dtype;
      pr.n = 4;
      pr.v = 4096;
      pr.ignored_rows = 0;
      pr.p.reduction = Reduction::kSum;
      CrossEntropy ce(pr);
      HostTensor& x = ce.mutable_x();
      for (std::int64_t i = 0; i < pr.n; ++i) {
        for (std::int64_t j = 0; j < pr.v; ++j) x.set(i, j, 0.0f);
        // p_y = e^t / (e^t + V - 1) => t = log(p_y (V - 1) / (1 - p_y)).
        x.set(i, ce.y()[i], static_cast<float>(std::log(p_y * (pr.v - 1) / (1 - p_y))));
      }
      const Oracle o = ce.expected();
      const CeRun run = ce.forward(true);
      for (std::int64_t i = 0; i < pr.n; ++i) {
        const double want = o.grad[i * pr.v + ce.y()[i]];
        const double got = run.grad.get(i, ce.y()[i]);
        EXPECT_LE(std::abs(got - want), std::abs(want) * (epsilon_of(dtype) + 1e-4))
            << tigon::dtype_name(dtype) << " p_y " << p_y << ": got " << got << " want " << want;
      }
    }
  }
}

TEST(CrossEntropy, StridedRowsAndEmptyBatch) {
  Problem pr;
  pr.n = 5;
  pr.v = 19;
  CrossEntropy ce(pr);
  const CeRun dense = ce.forward(false);
  // The same logits in a buffer with row stride 32.
  HostTensor wide(DType::kFloat32, {pr.n, pr.v}, 32);
  for (std::int64_t i = 0; i < pr.n; ++i)
    for (std::int64_t j = 0; j < pr.v; ++j) wide.set(i, j, ce.x().get(i, j));
  float loss = 0;
  const CrossEntropyInputs in = ce.inputs(wide.view());
  std::vector<std::uint8_t> ws(tigon::cross_entropy_fwd_workspace_size(CrossEntropyParams{}, in));
  tigon::cross_entropy_fwd(CrossEntropyParams{}, in, {view1d(&loss, DType::kFloat32, 1)}, {}, {},
                           Workspace{ws.data(), ws.size()});
  EXPECT_EQ(loss, dense.loss[0]);

  HostTensor empty(DType::kBFloat16, {0, 19});
  CrossEntropyInputs e;
  e.logits = empty.view();
  e.target = view1d(nullptr, DType::kInt64, 0);
  float l = -1;
  tigon::cross_entropy_fwd(CrossEntropyParams{}, e, {view1d(&l, DType::kFloat32, 1)}, {}, {},
                           Workspace{});
  EXPECT_EQ(l, 0.0f);
}

TEST(CrossEntropy, OutOfRangeTargetGivesNaN) {
  Problem pr;
  pr.p.reduction = Reduction::kNone;
  pr.ignored_rows = 0;
  CrossEntropy ce(pr);
  ce.y()[2] = pr.v + 3;
  const CeRun run = ce.forward(true);
  EXPECT_TRUE(std::isnan(run.loss[2]));
  EXPECT_FALSE(std::isnan(run.loss[1]));
}

// A NaN logit makes its row's loss NaN (as torch), also when only -inf logits come before it
// (the running max is still -inf when it is merged) and wherever it falls among the lanes.
TEST(CrossEntropy, NanLogitAfterNegativeInfinityGivesNaN) {
  for (std::int64_t nan_col = 0; nan_col < 20; ++nan_col) {
    Problem pr;
    pr.p.reduction = Reduction::kNone;
    pr.ignored_rows = 0;
    CrossEntropy ce(pr);
    for (std::int64_t j = 0; j < nan_col; ++j) ce.mutable_x().set(1, j, -INFINITY);
    ce.mutable_x().set(1, nan_col, NAN);
    const CeRun run = ce.forward(true);
    EXPECT_TRUE(std::isnan(run.loss[1])) << "NaN at column " << nan_col;
    EXPECT_FALSE(std::isnan(run.loss[0]));
  }
}

TEST(CrossEntropyErrors, NameTheArgument) {
  Problem pr;
  CrossEntropy ce(pr);
  HostTensor x = ce.x();
  CrossEntropyInputs in = ce.inputs(x.view());
  float loss[16];
  std::vector<std::uint8_t> ws(4096);
  auto run = [&](const CrossEntropyParams& p, const CrossEntropyInputs& i, std::int64_t nl) {
    tigon::cross_entropy_fwd(p, i, {view1d(loss, DType::kFloat32, nl)}, {}, {},
                             Workspace{ws.data(), ws.size()});
  };
  auto expect_error = [&](auto&& f, const std::string& arg) {
    try {
      f();
      ADD_FAILURE() << "no error for " << arg;
    } catch (const tigon::Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + arg + "'"), std::string::npos) << e.what();
    }
  };
  CrossEntropyParams bad;
  bad.label_smoothing = 1.5f;
  expect_error([&] { run(bad, in, 1); }, "label_smoothing");
  bad = {};
  bad.softcap = -1;
  expect_error([&] { run(bad, in, 1); }, "softcap");
  expect_error([&] { run({}, in, 2); }, "loss");  // mean: one element
  CrossEntropyInputs i2 = in;
  i2.target.dtype = DType::kFloat32;
  expect_error([&] { run({}, i2, 1); }, "target");
  i2 = in;
  i2.target.sizes[0] = 3;
  expect_error([&] { run({}, i2, 1); }, "target");
  i2 = in;
  float div = 2;
  i2.divisor = view1d(&div, DType::kFloat32, 1);
  expect_error([&] { run({}, i2, 1); }, "divisor");  // mean with a divisor
  CrossEntropyParams none;
  none.reduction = Reduction::kNone;
  expect_error([&] { run(none, in, 1); }, "loss");
}

}  // namespace

// The weighted mean's denominator, sum of w[target] over 8192 rows, at the size where a float32
// running sum was 2.1e-6 off (relative; torch's own float32 loss is 2.8e-8 off): the backends sum
// it, and the rows' terms, in float64.
TEST(CrossEntropy, WeightedMeanOfManyRowsMatchesFloat64) {
  Problem pr;
  pr.p.reduction = Reduction::kMean;
  pr.weighted = true;
  pr.n = 8192;
  pr.v = 32000;
  pr.ignored_rows = 0;
  CrossEntropy ce(pr);
  const CeRun run = ce.forward(false);
  const Oracle o = ce.expected();
  expect_close(o.loss, run.loss, 0.0, 2e-7, "weighted mean loss");
}

// 300000-class rows of logits with standard deviation 3 (the sum of exponentials over many terms,
// in float32): the loss and, for every probability above 1e-4, the gradient within 3e-6 of float64
// (relative); one running sum per lane of 18750 terms was 1.8e-5 off.
TEST(CrossEntropy, LargeVocabularyMatchesFloat64) {
  Problem pr;
  pr.p.reduction = Reduction::kNone;
  pr.n = 2;
  pr.v = 300000;
  pr.ignored_rows = 0;
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    pr.seed = seed;
    CrossEntropy ce(pr);
    HostTensor& x = ce.mutable_x();
    for (std::int64_t i = 0; i < pr.n; ++i)
      for (std::int64_t j = 0; j < pr.v; ++j) x.set(i, j, 1.5f * x.get(i, j));
    const CeRun run = ce.forward(true);
    const Oracle o = ce.expected();
    expect_close(o.loss, run.loss, 0.0, 1e-6, "loss");
    for (std::int64_t i = 0; i < pr.n; ++i)
      for (std::int64_t j = 0; j < pr.v; ++j) {
        const double want = o.grad[i * pr.v + j];
        if (std::abs(want) > 1e-4)
          ASSERT_NEAR(run.grad.get(i, j), want, 3e-6 * std::abs(want)) << i << "," << j;
      }
  }
}
