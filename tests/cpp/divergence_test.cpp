// kl_div / jsd / tvd CPU backend against a float64 oracle of include/tigon/ops/divergence.h:
// every dtype, every reduction (kNone with a float32 and an input-dtype loss), log_target, beta
// (including the special cases 0 and 1), ignored rows, all rows ignored, strided rows, a
// vocabulary longer than one lane_sum block, the fused forward gradient and the backward with an
// upstream gradient (scalar, and per element for kNone).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_at;

enum class Kind { kKlDiv, kJsd, kTvd };

struct Case {
  Kind kind;
  DType dtype;
  Reduction reduction;
  bool log_target = false;             // kl_div
  float beta = 0.5f;                   // jsd
  bool labels = false;                 // jsd, tvd: some rows ignored
  DType none_dtype = DType::kFloat32;  // the kNone loss and upstream gradient
};

std::string case_name(const Case& c) {
  const char* kinds[] = {"kl_div", "jsd", "tvd"};
  std::string s = std::string(kinds[static_cast<int>(c.kind)]) + "_" + tigon::dtype_name(c.dtype) +
                  "_" + tigon::reduction_name(c.reduction);
  if (c.kind == Kind::kKlDiv && c.log_target) s += "_logtarget";
  if (c.kind == Kind::kJsd) s += "_beta" + std::to_string(static_cast<int>(c.beta * 10));
  if (c.labels) s += "_labels";
  if (c.reduction == Reduction::kNone) s += std::string("_loss") + tigon::dtype_name(c.none_dtype);
  return s;
}

// One element of the oracle: loss and d loss / d input, and the magnitudes of the terms they are
// formed from (their float32 rounding error is relative to these).
struct Term {
  double loss, loss_scale, grad, grad_scale;
};

Term oracle_term(const Case& c, double x, double t) {
  switch (c.kind) {
    case Kind::kKlDiv: {
      if (c.log_target) {
        const double p = std::exp(t);
        return {p * (t - x), p * (std::fabs(t) + std::fabs(x)), -p, p};
      }
      const double log_t = t == 0.0 ? 0.0 : std::log(t);
      return {t * (log_t - x), std::fabs(t) * (std::fabs(log_t) + std::fabs(x)), -t, std::fabs(t)};
    }
    case Kind::kJsd: {
      const double p = std::exp(t), q = std::exp(x), b = c.beta;
      const double mag = std::fabs(x) + std::fabs(t);
      if (b == 0.0) return {p * (t - x), p * mag, -p, p};
      if (b == 1.0) return {q * (x - t), q * mag, q * (x - t) + q, q * mag + q};
      const double m = b * p + (1 - b) * q, log_m = std::log(m);
      return {b * p * t + (1 - b) * q * x - m * log_m,
              b * p * std::fabs(t) + (1 - b) * q * std::fabs(x) + m * std::fabs(log_m),
              (1 - b) * q * (x - log_m), (1 - b) * q * (std::fabs(x) + std::fabs(log_m))};
    }
    case Kind::kTvd:
      return {0.5 * std::fabs(x - t), 0.5 * (std::fabs(x) + std::fabs(t)), x > t ? 0.5 : -0.5, 0.5};
  }
  return {};
}

class Problem {
 public:
  static constexpr std::int64_t kPad = 5;

  Problem(const Case& c, std::vector<std::int64_t> sizes, std::uint32_t seed)
      : c_(c),
        sizes_(sizes),
        vocab_(sizes.back()),
        input_(c.dtype, sizes, sizes.back() + kPad),
        target_(c.dtype, sizes, sizes.back() + 3),
        grad_(c.dtype, sizes, sizes.back() + 1),
        loss_none_(c.none_dtype, sizes),
        upstream_none_(c.none_dtype, sizes) {
    rows_ = input_.rows();
    first_dim_ = sizes.front();
    std::mt19937 rng(seed);
    fill_distribution(input_, rng, c.kind != Kind::kTvd);
    // kl_div's plain target is a probability, with some exact zeros (xlogy's 0 * log 0 = 0).
    const bool target_log = c.kind == Kind::kJsd || (c.kind == Kind::kKlDiv && c.log_target);
    fill_distribution(target_, rng, target_log);
    if (c.kind == Kind::kKlDiv && !c.log_target) target_.set(0, 1, 0.0f);
    labels_.assign(rows_, 7);
    if (c.labels) {
      for (std::int64_t r = 0; r < rows_; r += 3) labels_[r] = -100;
    }
    std::uniform_real_distribution<float> up(-2.0f, 2.0f);
    for (std::int64_t r = 0; r < rows_; ++r)
      for (std::int64_t j = 0; j < vocab_; ++j) upstream_none_.set(r, j, up(rng));
  }

  tigon::DivergenceInputs inputs() {
    tigon::DivergenceInputs in{input_.view(), target_.view(), {}};
    if (c_.labels) {
      in.labels = TensorView::contiguous(labels_.data(), DType::kInt64, {rows_});
    }
    return in;
  }

  bool ignored(std::int64_t r) const { return c_.labels && labels_[r] == -100; }

  std::int64_t counted() const {
    std::int64_t n = 0;
    for (std::int64_t r = 0; r < rows_; ++r) n += ignored(r) ? 0 : 1;
    return n;
  }

  double denominator() const {
    const double n = static_cast<double>(counted());
    switch (effective_reduction()) {
      case Reduction::kMean: return n * static_cast<double>(vocab_);
      case Reduction::kBatchMean:
        return c_.kind == Kind::kKlDiv ? static_cast<double>(first_dim_) : n;
      default: return 1.0;
    }
  }

  Reduction effective_reduction() const {
    return c_.kind == Kind::kJsd ? Reduction::kBatchMean : c_.reduction;
  }

  Term term(std::int64_t r, std::int64_t j) const {
    return oracle_term(c_, input_.get(r, j), target_.get(r, j));
  }

  // Runs the forward with the fused gradient and checks loss and gradient.
  void check_forward() {
    const bool none = effective_reduction() == Reduction::kNone;
    float scalar_loss = -1.0f;
    TensorView loss =
        none ? loss_none_.view() : TensorView::contiguous(&scalar_loss, DType::kFloat32, {1});
    std::vector<std::uint8_t> ws(workspace_size());
    call_fwd(loss, grad_.view(), {ws.data(), ws.size()});
    const double d = denominator();
    const double scale = d != 0.0 ? 1.0 / d : 0.0;
    double sum = 0.0, mag = 0.0;
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t j = 0; j < vocab_; ++j) {
        const Term e = ignored(r) ? Term{} : term(r, j);
        sum += e.loss;
        mag += e.loss_scale;
        if (none) {
          const double got = loss_none_.get(r, j);
          EXPECT_NEAR(got, e.loss, 1e-6 * e.loss_scale + ulp_at(c_.none_dtype, e.loss))
              << "loss at " << r << ", " << j;
        }
        const double g_ref = e.grad * scale;
        EXPECT_NEAR(grad_.get(r, j), g_ref, 1e-6 * e.grad_scale * scale + ulp_at(c_.dtype, g_ref))
            << "grad at " << r << ", " << j;
      }
    }
    if (!none) {
      const double ref = d != 0.0 ? sum / d : 0.0;
      const double tol = (4e-6 * mag + 1e-30) * (d != 0.0 ? 1.0 / d : 0.0);
      EXPECT_NEAR(scalar_loss, ref, tol + ulp_at(DType::kFloat32, ref));
    }
  }

  // The backward with an upstream gradient; with u = 1 (scalar reductions) it must give the
  // fused forward's bits.
  void check_backward(float upstream) {
    const bool none = effective_reduction() == Reduction::kNone;
    HostTensor grad(c_.dtype, sizes_);
    TensorView up =
        none ? upstream_none_.view() : TensorView::contiguous(&upstream, DType::kFloat32, {1});
    std::vector<std::uint8_t> ws(workspace_size());
    const TensorView gv = grad.view();
    call_bwd(up, gv, {ws.data(), ws.size()});
    const double d = denominator();
    const double scale = d != 0.0 ? 1.0 / d : 0.0;
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t j = 0; j < vocab_; ++j) {
        const Term e = ignored(r) ? Term{} : term(r, j);
        const double u = none ? upstream_none_.get(r, j) : upstream * scale;
        const double g_ref = e.grad * u;
        EXPECT_NEAR(grad.get(r, j), g_ref,
                    1e-6 * e.grad_scale * std::fabs(u) + ulp_at(c_.dtype, g_ref))
            << "grad at " << r << ", " << j;
        if (!none && upstream == 1.0f) {
          EXPECT_EQ(grad.bits(r, j), grad_.bits(r, j)) << "fused vs backward at " << r << ", " << j;
        }
      }
    }
  }

  void ignore_all() { labels_.assign(rows_, -100); }

 private:
  // Rows of a softmax (or its log) of random logits, computed in float64 and stored rounded.
  void fill_distribution(HostTensor& h, std::mt19937& rng, bool log) {
    std::normal_distribution<double> dist(0.0, 2.0);
    std::vector<double> z(vocab_);
    for (std::int64_t r = 0; r < rows_; ++r) {
      double m = -INFINITY, s = 0.0;
      for (auto& v : z) m = std::fmax(m, v = dist(rng));
      for (double v : z) s += std::exp(v - m);
      const double lse = m + std::log(s);
      for (std::int64_t j = 0; j < vocab_; ++j) {
        h.set(r, j, static_cast<float>(log ? z[j] - lse : std::exp(z[j] - lse)));
      }
    }
  }

  std::size_t workspace_size() {
    switch (c_.kind) {
      case Kind::kKlDiv: return tigon::kl_div_workspace_size(kl_params(), inputs());
      case Kind::kJsd: return tigon::jsd_workspace_size(jsd_params(), inputs());
      case Kind::kTvd: return tigon::tvd_workspace_size(tvd_params(), inputs());
    }
    return 0;
  }
  void call_fwd(const TensorView& loss, const TensorView& grad, tigon::Workspace ws) {
    switch (c_.kind) {
      case Kind::kKlDiv: return tigon::kl_div_fwd(kl_params(), inputs(), loss, grad, ws);
      case Kind::kJsd: return tigon::jsd_fwd(jsd_params(), inputs(), loss, grad, ws);
      case Kind::kTvd: return tigon::tvd_fwd(tvd_params(), inputs(), loss, grad, ws);
    }
  }
  void call_bwd(const TensorView& up, const TensorView& grad, tigon::Workspace ws) {
    switch (c_.kind) {
      case Kind::kKlDiv: return tigon::kl_div_bwd(kl_params(), inputs(), up, grad, ws);
      case Kind::kJsd: return tigon::jsd_bwd(jsd_params(), inputs(), up, grad, ws);
      case Kind::kTvd: return tigon::tvd_bwd(tvd_params(), inputs(), up, grad, ws);
    }
  }
  tigon::KlDivParams kl_params() const { return {c_.reduction, c_.log_target}; }
  tigon::JsdParams jsd_params() const { return {c_.beta, -100}; }
  tigon::TvdParams tvd_params() const { return {c_.reduction, -100}; }

  Case c_;
  std::vector<std::int64_t> sizes_;
  std::int64_t vocab_, rows_ = 0, first_dim_ = 0;
  HostTensor input_, target_, grad_, loss_none_, upstream_none_;
  std::vector<std::int64_t> labels_;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const Reduction reductions[] = {Reduction::kNone, Reduction::kSum, Reduction::kMean,
                                  Reduction::kBatchMean};
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (Reduction r : reductions) {
      std::vector<DType> none_dtypes = {DType::kFloat32};
      if (r == Reduction::kNone && t != DType::kFloat32) none_dtypes.push_back(t);
      for (DType none_dtype : none_dtypes) {
        for (bool log_target : {false, true}) {
          cases.push_back({Kind::kKlDiv, t, r, log_target, 0.5f, false, none_dtype});
        }
        for (bool labels : {false, true}) {
          cases.push_back({Kind::kTvd, t, r, false, 0.5f, labels, none_dtype});
        }
      }
    }
    for (float beta : {0.0f, 0.1f, 0.5f, 0.9f, 1.0f}) {
      for (bool labels : {false, true}) {
        cases.push_back({Kind::kJsd, t, Reduction::kBatchMean, false, beta, labels});
      }
    }
  }
  return cases;
}

class Divergence : public ::testing::TestWithParam<Case> {};

// [2, 3, 37]: batchmean of kl_div divides by 2 (input.size(0)), the others by the rows counted.
TEST_P(Divergence, MatchesTheOracle) {
  Problem p(GetParam(), {2, 3, 37}, 1234);
  p.check_forward();
  p.check_backward(1.0f);
  p.check_backward(-2.5f);
}

// 1100 classes: more than one lane_sum block of 16 x 64 terms.
TEST_P(Divergence, LongRows) {
  Problem p(GetParam(), {3, 1100}, 99);
  p.check_forward();
  p.check_backward(0.75f);
}

TEST_P(Divergence, AllRowsIgnored) {
  if (!GetParam().labels) GTEST_SKIP() << "no labels";
  Problem p(GetParam(), {4, 19}, 7);
  p.ignore_all();
  p.check_forward();
  p.check_backward(3.0f);
}

INSTANTIATE_TEST_SUITE_P(AllOptions, Divergence, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

// Rows are independent of the batch and the loss of one problem does not depend on the thread
// schedule: two runs give the same bits.
TEST(DivergenceBits, RunToRun) {
  const std::int64_t rows = 64, vocab = 3000;
  HostTensor x(DType::kBFloat16, {rows, vocab}), t(DType::kBFloat16, {rows, vocab});
  std::mt19937 rng(5);
  x.fill_normal(rng, -9.0f, 1.0f);
  t.fill_normal(rng, -9.0f, 1.0f);
  const tigon::JsdParams params{0.3f, -100};
  const tigon::DivergenceInputs in{x.view(), t.view(), {}};
  std::vector<std::uint8_t> ws(tigon::jsd_workspace_size(params, in));
  float first = 0.0f, second = 1.0f;
  tigon::jsd_fwd(params, in, TensorView::contiguous(&first, DType::kFloat32, {}), {},
                 {ws.data(), ws.size()});
  tigon::jsd_fwd(params, in, TensorView::contiguous(&second, DType::kFloat32, {}), {},
                 {ws.data(), ws.size()});
  EXPECT_EQ(tigon::math::float_bits(first), tigon::math::float_bits(second));
}

// Empty inputs: nothing to reduce, loss 0.
TEST(DivergenceBits, EmptyInputGivesZero) {
  HostTensor x(DType::kFloat32, {0, 8}), t(DType::kFloat32, {0, 8});
  const tigon::TvdParams params{Reduction::kBatchMean, -100};
  const tigon::DivergenceInputs in{x.view(), t.view(), {}};
  float loss = -1.0f;
  tigon::tvd_fwd(params, in, TensorView::contiguous(&loss, DType::kFloat32, {}), {}, {});
  EXPECT_EQ(loss, 0.0f);
}

}  // namespace
