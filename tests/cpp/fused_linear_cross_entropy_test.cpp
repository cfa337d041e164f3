// Fused linear cross-entropy CPU backend: equals the cross-entropy of the materialized logits
// (same loss bits whatever the chunk size), and its gradients equal the products of that
// cross-entropy gradient with the weight and the hidden states (float64 reference).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "host_tensor.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::HostTensor;

TensorView vec(void* p, DType d, std::int64_t n) { return TensorView::contiguous(p, d, {n}); }

struct Result {
  float loss = 0;
  std::vector<float> dx, dw, db;
};

struct Flce {
  std::int64_t n = 11, h = 9, v = 23;
  DType dtype = DType::kBFloat16;
  HostTensor x{DType::kBFloat16, {11, 9}}, w{DType::kBFloat16, {23, 9}};
  std::vector<float> bias;
  std::vector<std::int64_t> y;
  tigon::FusedLinearCrossEntropyParams params;

  explicit Flce(DType d) : dtype(d), x(d, {11, 9}), w(d, {23, 9}) {
    std::mt19937 rng(5);
    x.fill_normal(rng);
    w.fill_normal(rng, 0.0f, 0.5f);
    std::normal_distribution<float> nd;
    for (std::int64_t j = 0; j < v; ++j) bias.push_back(nd(rng));
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) y.push_back(i % 4 == 1 ? -100 : cls(rng));
    params.ce.label_smoothing = 0.1f;
    params.ce.lse_square_scale = 1e-3f;
    params.ce.softcap = 6.0f;
  }

  tigon::FusedLinearCrossEntropyInputs inputs() {
    tigon::FusedLinearCrossEntropyInputs in;
    in.hidden = x.view();
    in.weight = w.view();
    in.bias = vec(bias.data(), DType::kFloat32, v);
    in.target = vec(y.data(), DType::kInt64, n);
    return in;
  }

  Result fused(std::int64_t chunk, DType dw_dtype) {
    params.chunk_rows = chunk;
    Result r;
    HostTensor dx(dtype, {n, h}), dw(dw_dtype, {v, h});
    std::vector<float> db(v);
    tigon::FusedLinearCrossEntropyGrads g{dx.view(), dw.view(), vec(db.data(), DType::kFloat32, v)};
    const auto in = inputs();
    std::vector<unsigned char> ws(tigon::fused_linear_cross_entropy_workspace_size(params, in, g));
    tigon::fused_linear_cross_entropy(params, in, vec(&r.loss, DType::kFloat32, 1), {}, g,
                                      Workspace{ws.data(), ws.size()});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) r.dx.push_back(dx.get(i, k));
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) r.dw.push_back(dw.get(j, k));
    r.db = db;
    return r;
  }

  // Materialized logits (rounded like the fused path), cross_entropy_fwd, float64 products.
  Result unfused() {
    HostTensor logits(dtype, {n, v}), grad(dtype, {n, v});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < v; ++j) {
        float dot = 0;  // lane order differs from the backend: compare with a tolerance
        for (std::int64_t k = 0; k < h; ++k) dot += x.get(i, k) * w.get(j, k);
        logits.set(i, j, dot);
        logits.set(i, j, logits.get(i, j) + bias[j]);
      }
    tigon::CrossEntropyInputs in;
    in.logits = logits.view();
    in.target = vec(y.data(), DType::kInt64, n);
    Result r;
    std::vector<unsigned char> ws(tigon::cross_entropy_fwd_workspace_size(params.ce, in));
    tigon::cross_entropy_fwd(params.ce, in, vec(&r.loss, DType::kFloat32, 1), {}, {}, grad.view(),
                             Workspace{ws.data(), ws.size()});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) {
        double s = 0;
        for (std::int64_t j = 0; j < v; ++j) s += double(grad.get(i, j)) * w.get(j, k);
        r.dx.push_back(static_cast<float>(s));
      }
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += double(grad.get(i, j)) * x.get(i, k);
        r.dw.push_back(static_cast<float>(s));
      }
    for (std::int64_t j = 0; j < v; ++j) {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) s += grad.get(i, j);
      r.db.push_back(static_cast<float>(s));
    }
    return r;
  }
};

void expect_near(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 0;
  for (float v : b) scale = std::max(scale, double(std::abs(v)));
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * scale) << i;
}

TEST(FusedLinearCrossEntropy, MatchesUnfusedForEveryChunkSize) {
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    Flce f(d);
    const Result want = f.unfused();
    const double tol = d == DType::kFloat32 ? 1e-5 : 2e-2;
    Result first;
    for (std::int64_t chunk : {0, 1, 3, 11}) {
      const Result got = f.fused(chunk, DType::kFloat32);
      EXPECT_NEAR(got.loss, want.loss, 1e-3 * std::abs(want.loss) + 1e-5) << chunk;
      expect_near(got.dx, want.dx, tol);
      expect_near(got.dw, want.dw, tol);
      expect_near(got.db, want.db, tol);
      if (chunk == 0) first = got;
      EXPECT_EQ(got.loss, first.loss) << "chunking must not change the loss";
      EXPECT_EQ(got.dx, first.dx) << "nor dx";
    }
    // dW accumulated in the weight's dtype: one rounding per chunk.
    const Result low = f.fused(3, d);
    expect_near(low.dw, want.dw, d == DType::kFloat32 ? 1e-5 : 4e-2);
  }
}

TEST(FusedLinearCrossEntropy, RejectsGradientsWithReductionNone) {
  Flce f(DType::kFloat32);
  f.params.ce.reduction = Reduction::kNone;
  std::vector<float> loss(f.n);
  HostTensor dx(DType::kFloat32, {f.n, f.h});
  tigon::FusedLinearCrossEntropyGrads g;
  g.hidden = dx.view();
  EXPECT_THROW(
      tigon::fused_linear_cross_entropy(f.params, f.inputs(),
                                        vec(loss.data(), DType::kFloat32, f.n), {}, g, Workspace{}),
      tigon::Error);
}

}  // namespace
