// The predictions and token accuracy of cross-entropy and fused linear cross-entropy (CPU
// backend) against a brute-force argmax written as torch.argmax is documented (first maximum,
// first NaN): deliberate ties across the backend's lanes, NaN and all -inf rows, ties created by
// the softcap's saturation, ignored and out-of-range targets, every reduction and dtype, FLCE
// chunks cutting through the batch; asking for them leaves the loss and gradient bits unchanged.
// And the validation of the two outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::CrossEntropyInputs;
using tigon::CrossEntropyOutputs;
using tigon::CrossEntropyParams;
using tigon::DType;
using tigon::ErrorCode;
using tigon::Reduction;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;

TensorView vec(void* p, DType d, std::int64_t n) { return TensorView::contiguous(p, d, {n}); }

// The capped float32 logit as the header specifies it.
float capped(float x, float softcap) {
  return softcap > 0.0f ? softcap * std::tanh(x * (1.0f / softcap)) : x;
}

// torch.argmax of a row: the first NaN, else the first of the largest values.
std::int64_t brute_argmax(const HostTensor& x, std::int64_t row, float softcap) {
  std::int64_t best = 0;
  for (std::int64_t j = 1; j < x.hidden(); ++j) {
    const float b = capped(x.get(row, best), softcap), c = capped(x.get(row, j), softcap);
    if (std::isnan(b)) break;
    if (std::isnan(c) || c > b) best = j;
  }
  return best;
}

struct Expected {
  std::vector<std::int64_t> predicted;
  std::vector<float> accuracy;  // [N] (none) or [1]
};

Expected expected(const HostTensor& x, const std::vector<std::int64_t>& y,
                  const CrossEntropyParams& p) {
  Expected e;
  double hits = 0, count = 0;
  for (std::int64_t i = 0; i < x.rows(); ++i) {
    const bool ignored = y[i] == p.ignore_index;
    const std::int64_t pred = ignored ? -1 : brute_argmax(x, i, p.softcap);
    const float hit = pred == y[i] ? 1.0f : 0.0f;
    e.predicted.push_back(pred);
    if (p.reduction == Reduction::kNone) e.accuracy.push_back(hit);
    hits += hit;
    count += ignored ? 0 : 1;
  }
  if (p.reduction != Reduction::kNone) {
    e.accuracy.push_back(count > 0 ? static_cast<float>(hits / count) : 0.0f);
  }
  return e;
}

// Logits with deliberate ties: the backend keeps 16 interleaved lanes (class j in lane j % 16),
// so ties put the smaller index in a higher lane than the larger one.
struct Batch {
  HostTensor x;
  std::vector<std::int64_t> y;

  Batch(DType d, std::int64_t n, std::int64_t v, float softcap, std::uint32_t seed) : x(d, {n, v}) {
    EXPECT_GE(n, 7);
    EXPECT_GE(v, 36);
    std::mt19937 rng(seed);
    x.fill_normal(rng, 0.0f, 2.0f);
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) y.push_back(cls(rng));
    for (std::int64_t j : {14, 17, 33}) x.set(0, j, 20.0f);  // 14 (lane 14) before 17 (lane 1)
    y[0] = 14;                                               // a hit
    for (std::int64_t j : {3, 19, 35}) x.set(1, j, 20.0f);
    y[1] = 19;          // the tie goes to 3: a miss
    x.set(2, 30, NAN);  // lane 14, merged into lane 0 before lane 1
    x.set(2, 17, NAN);
    x.set(2, 5, 1e4f);
    y[2] = 17;  // the first NaN: a hit
    for (std::int64_t j = 0; j < v; ++j) x.set(3, j, -INFINITY);
    y[3] = 0;           // all -inf: class 0
    x.set(4, 9, 1e4f);  // capped, 4 and 9 are equal (tanh saturates): 4; uncapped: 9
    x.set(4, 4, 5e3f);
    y[4] = softcap > 0.0f ? 4 : 9;
    y[5] = -100;   // ignored
    y[6] = v + 3;  // out of range: a miss (loss NaN)
    for (std::int64_t i = 7; i < n; i += 3) y[i] = brute_argmax(x, i, softcap);  // more hits
    for (std::int64_t i = 9; i < n; i += 5) y[i] = -100;
  }
};

struct CeResult {
  std::vector<float> loss, accuracy;
  std::vector<std::int64_t> predicted;
  HostTensor grad;
};

CeResult run_ce(const CrossEntropyParams& p, Batch& b, bool predict, bool with_grad = true) {
  const std::int64_t n = b.x.rows(), v = b.x.hidden();
  const std::int64_t nl = p.reduction == Reduction::kNone ? n : 1;
  CeResult r{std::vector<float>(nl, -7.0f), std::vector<float>(nl, -7.0f),
             std::vector<std::int64_t>(n, -7), HostTensor(b.x.dtype(), {n, v})};
  CrossEntropyInputs in;
  in.logits = b.x.view();
  in.target = vec(b.y.data(), DType::kInt64, n);
  CrossEntropyOutputs out{vec(r.loss.data(), DType::kFloat32, nl)};
  if (predict) {
    out.predicted = vec(r.predicted.data(), DType::kInt64, n);
    out.accuracy = vec(r.accuracy.data(), DType::kFloat32, nl);
  }
  std::vector<std::uint8_t> ws(tigon::cross_entropy_fwd_workspace_size(p, in));
  tigon::cross_entropy_fwd(p, in, out, {}, with_grad ? r.grad.view() : TensorView{},
                           Workspace{ws.data(), ws.size()});
  return r;
}

std::vector<std::uint32_t> bits(const HostTensor& t) {
  std::vector<std::uint32_t> out;
  for (std::int64_t i = 0; i < t.rows(); ++i)
    for (std::int64_t j = 0; j < t.hidden(); ++j) out.push_back(t.bits(i, j));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (tigon::math::float_bits(a[i]) != tigon::math::float_bits(b[i])) return false;
  return true;
}

TEST(CrossEntropyPredictions, MatchBruteForceArgmaxForEveryReductionAndDtype) {
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum})
      for (float softcap : {0.0f, 2.0f})
        for (std::int64_t v : {37, 100}) {
          CrossEntropyParams p;
          p.reduction = red;
          p.softcap = softcap;
          p.label_smoothing = softcap > 0.0f ? 0.1f : 0.0f;
          Batch b(d, 23, v, softcap, static_cast<std::uint32_t>(v));
          const Expected want = expected(b.x, b.y, p);
          const CeResult got = run_ce(p, b, true);
          const std::string what = std::string(tigon::dtype_name(d)) + " " +
                                   tigon::reduction_name(red) + " softcap " +
                                   std::to_string(softcap) + " V " + std::to_string(v);
          EXPECT_EQ(got.predicted, want.predicted) << what;
          EXPECT_EQ(got.accuracy, want.accuracy) << what;
          EXPECT_EQ(got.predicted[0], 14) << what;
          EXPECT_EQ(got.predicted[1], 3) << what;
          EXPECT_EQ(got.predicted[2], 17) << what;
          EXPECT_EQ(got.predicted[3], 0) << what;
          EXPECT_EQ(got.predicted[4], softcap > 0.0f ? 4 : 9) << what;
          EXPECT_EQ(got.predicted[5], -1) << what;

          // The loss and the gradient have the same bits with and without predictions.
          const CeResult plain = run_ce(p, b, false);
          EXPECT_TRUE(same_bits(got.loss, plain.loss)) << what;
          EXPECT_EQ(bits(got.grad), bits(plain.grad)) << what;
        }
}

TEST(CrossEntropyPredictions, EitherOutputAloneAndWithoutGradient) {
  CrossEntropyParams p;
  Batch b(DType::kBFloat16, 12, 40, 0.0f, 3);
  const Expected want = expected(b.x, b.y, p);
  const std::int64_t n = 12;
  std::vector<float> loss(1), accuracy(1, -1.0f);
  std::vector<std::int64_t> predicted(n, -7);
  CrossEntropyInputs in;
  in.logits = b.x.view();
  in.target = vec(b.y.data(), DType::kInt64, n);
  std::vector<std::uint8_t> ws(tigon::cross_entropy_fwd_workspace_size(p, in));
  CrossEntropyOutputs only_accuracy{vec(loss.data(), DType::kFloat32, 1)};
  only_accuracy.accuracy = vec(accuracy.data(), DType::kFloat32, 1);
  tigon::cross_entropy_fwd(p, in, only_accuracy, {}, {}, Workspace{ws.data(), ws.size()});
  EXPECT_EQ(accuracy, want.accuracy);
  CrossEntropyOutputs only_predicted{vec(loss.data(), DType::kFloat32, 1)};
  only_predicted.predicted = vec(predicted.data(), DType::kInt64, n);
  tigon::cross_entropy_fwd(p, in, only_predicted, {}, {}, Workspace{ws.data(), ws.size()});
  EXPECT_EQ(predicted, want.predicted);
}

TEST(CrossEntropyPredictions, AllIgnoredBatchHasAccuracyZero) {
  for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
    CrossEntropyParams p;
    p.reduction = red;
    Batch b(DType::kFloat32, 8, 40, 0.0f, 4);
    b.y.assign(8, p.ignore_index);
    const CeResult got = run_ce(p, b, true);
    EXPECT_EQ(got.predicted, std::vector<std::int64_t>(8, -1));
    EXPECT_EQ(got.accuracy, std::vector<float>(red == Reduction::kNone ? 8 : 1, 0.0f));
  }
}

TEST(CrossEntropyPredictions, InPlaceGradientKeepsThePredictions) {
  CrossEntropyParams p;
  p.softcap = 2.0f;
  Batch b(DType::kBFloat16, 15, 37, p.softcap, 8);
  const Expected want = expected(b.x, b.y, p);
  const std::int64_t n = 15;
  std::vector<float> loss(1), accuracy(1);
  std::vector<std::int64_t> predicted(n);
  CrossEntropyInputs in;
  in.logits = b.x.view();
  in.target = vec(b.y.data(), DType::kInt64, n);
  CrossEntropyOutputs out{vec(loss.data(), DType::kFloat32, 1)};
  out.predicted = vec(predicted.data(), DType::kInt64, n);
  out.accuracy = vec(accuracy.data(), DType::kFloat32, 1);
  std::vector<std::uint8_t> ws(tigon::cross_entropy_fwd_workspace_size(p, in));
  tigon::cross_entropy_fwd(p, in, out, {}, in.logits, Workspace{ws.data(), ws.size()});
  EXPECT_EQ(predicted, want.predicted);
  EXPECT_EQ(accuracy, want.accuracy);
}

TEST(CrossEntropyPredictionsErrors, NameTheArgument) {
  const std::int64_t n = 7;
  Batch b(DType::kFloat32, n, 40, 0.0f, 5);
  CrossEntropyInputs in;
  in.logits = b.x.view();
  in.target = vec(b.y.data(), DType::kInt64, n);
  std::vector<std::uint8_t> ws(4096);
  float loss[8], accuracy[8];
  std::int64_t predicted[8], wide[16];
  const auto run = [&](Reduction red, TensorView pred, TensorView acc) {
    CrossEntropyParams p;
    p.reduction = red;
    CrossEntropyOutputs out{vec(loss, DType::kFloat32, red == Reduction::kNone ? n : 1)};
    out.predicted = pred;
    out.accuracy = acc;
    return [=, &in, &ws] {
      tigon::cross_entropy_fwd(p, in, out, {}, {}, Workspace{ws.data(), ws.size()});
    };
  };
  const TensorView ok_pred = vec(predicted, DType::kInt64, n);
  expect_error(run(Reduction::kMean, vec(loss, DType::kFloat32, n), {}), ErrorCode::kTypeError,
               "predicted", "dtype int64", "cross_entropy_fwd");
  expect_error(run(Reduction::kMean, vec(predicted, DType::kInt64, n - 1), {}),
               ErrorCode::kInvalidArgument, "predicted", "7 elements");
  TensorView strided = vec(wide, DType::kInt64, n);
  strided.strides[0] = 2;
  expect_error(run(Reduction::kMean, strided, {}), ErrorCode::kInvalidArgument, "predicted",
               "contiguous");
  TensorView on_gpu = ok_pred;
  on_gpu.device = tigon::Device::cuda(0);
  expect_error(run(Reduction::kMean, on_gpu, {}), ErrorCode::kInvalidArgument, "predicted",
               "the logits' device");
  expect_error(run(Reduction::kMean, ok_pred, vec(accuracy, DType::kFloat32, n)),
               ErrorCode::kInvalidArgument, "accuracy", "one element");
  expect_error(run(Reduction::kNone, ok_pred, vec(accuracy, DType::kFloat32, 1)),
               ErrorCode::kInvalidArgument, "accuracy", "7 elements");
  expect_error(run(Reduction::kSum, ok_pred, vec(predicted, DType::kInt64, 1)),
               ErrorCode::kTypeError, "accuracy", "dtype float32");
}

// ------------------------------------------------------------------ fused linear cross-entropy

// hidden [n, h], weight [v, h] with rows 2 and 7 equal (and equal bias): their logits tie in
// every row, and rows 3k of hidden make them the largest.
struct FlceBatch {
  std::int64_t n, h = 8, v = 21;
  DType dtype;
  HostTensor x, w;
  std::vector<float> bias;
  std::vector<std::int64_t> y;

  FlceBatch(DType d, std::int64_t n_) : n(n_), dtype(d), x(d, {n_, 8}), w(d, {21, 8}) {
    std::mt19937 rng(11);
    x.fill_normal(rng);
    w.fill_normal(rng, 0.0f, 0.3f);
    for (std::int64_t k = 0; k < h; ++k) {
      w.set(7, k, 0.5f);
      w.set(2, k, 0.5f);
    }
    for (std::int64_t i = 0; i < n; i += 3)
      for (std::int64_t k = 0; k < h; ++k) x.set(i, k, 2.0f);
    std::normal_distribution<float> nd(0.0f, 0.1f);
    for (std::int64_t j = 0; j < v; ++j) bias.push_back(j == 7 ? 0.25f : j == 2 ? 0.25f : nd(rng));
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) y.push_back(i % 6 == 0 ? 2 : i % 6 == 3 ? 7 : cls(rng));
    for (std::int64_t i = 4; i < n; i += 5) y[i] = -100;
  }

  // The logits the fused path forms: round_T(x @ w^T), + bias, rounded again.
  HostTensor logits() const {
    HostTensor out(dtype, {n, v});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < v; ++j) {
        double dot = 0;
        for (std::int64_t k = 0; k < h; ++k) dot += double(x.get(i, k)) * w.get(j, k);
        out.set(i, j, static_cast<float>(dot));
        out.set(i, j, out.get(i, j) + bias[j]);
      }
    return out;
  }
};

TEST(FusedLinearCrossEntropyPredictions, MatchTheLogitsArgmaxForEveryChunkSize) {
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (Reduction red : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      FlceBatch f(d, 17);
      tigon::FusedLinearCrossEntropyParams p;
      p.ce.reduction = red;
      const Expected want = expected(f.logits(), f.y, p.ce);
      for (std::int64_t i = 0; i < f.n; i += 3) {
        if (f.y[i] != -100) EXPECT_EQ(want.predicted[i], 2) << "the tie goes to class 2";
      }
      const std::int64_t nl = red == Reduction::kNone ? f.n : 1;
      for (std::int64_t chunk : {0, 1, 2, 5, 16}) {
        std::vector<float> loss(nl), accuracy(nl, -1.0f);
        std::vector<std::int64_t> predicted(f.n, -7);
        tigon::FusedLinearCrossEntropyInputs in;
        in.hidden = f.x.view();
        in.weight = f.w.view();
        in.bias = vec(f.bias.data(), DType::kFloat32, f.v);
        in.target = vec(f.y.data(), DType::kInt64, f.n);
        CrossEntropyOutputs out{vec(loss.data(), DType::kFloat32, nl)};
        out.predicted = vec(predicted.data(), DType::kInt64, f.n);
        out.accuracy = vec(accuracy.data(), DType::kFloat32, nl);
        p.chunk_rows = chunk;
        HostTensor dx(d, {f.n, f.h});
        tigon::FusedLinearCrossEntropyGrads g;
        if (red != Reduction::kNone) g.hidden = dx.view();
        std::vector<unsigned char> ws(tigon::fused_linear_cross_entropy_workspace_size(p, in, g));
        tigon::fused_linear_cross_entropy(p, in, out, g, Workspace{ws.data(), ws.size()});
        const std::string what = std::string(tigon::dtype_name(d)) + " " +
                                 tigon::reduction_name(red) + " chunk " + std::to_string(chunk);
        EXPECT_EQ(predicted, want.predicted) << what;
        EXPECT_EQ(accuracy, want.accuracy) << what;
      }
    }
}

TEST(FusedLinearCrossEntropyPredictionsErrors, NameTheArgument) {
  FlceBatch f(DType::kFloat32, 5);
  tigon::FusedLinearCrossEntropyInputs in;
  in.hidden = f.x.view();
  in.weight = f.w.view();
  in.target = vec(f.y.data(), DType::kInt64, f.n);
  float loss = 0, accuracy[8];
  std::int64_t predicted[8];
  std::vector<unsigned char> ws(1 << 16);
  const auto run = [&](TensorView pred, TensorView acc) {
    CrossEntropyOutputs out{vec(&loss, DType::kFloat32, 1)};
    out.predicted = pred;
    out.accuracy = acc;
    return [=, &in, &ws] {
      tigon::fused_linear_cross_entropy({}, in, out, {}, Workspace{ws.data(), ws.size()});
    };
  };
  expect_error(run(vec(predicted, DType::kInt64, 4), {}), ErrorCode::kInvalidArgument, "predicted",
               "5 elements", "fused_linear_cross_entropy");
  expect_error(run({}, vec(accuracy, DType::kFloat32, 5)), ErrorCode::kInvalidArgument, "accuracy",
               "one element");
}

}  // namespace
