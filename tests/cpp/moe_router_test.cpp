// Softmax-then-top-k routing, CPU backend, against a float64 oracle (include/tigon/ops/
// moe_router.h): the experts chosen, the weights with and without renormalization in float32 and
// in the logits' dtype, the logits' gradient; and every validation error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_at;

struct RouterCase {
  std::int64_t n, e, k;
  DType dtype;
  bool weights_fp32, renormalize;
};

class MoeRouterCpu : public ::testing::TestWithParam<RouterCase> {};

TEST_P(MoeRouterCpu, MatchesFloat64Oracle) {
  const RouterCase c = GetParam();
  const DType wdt = c.weights_fp32 ? DType::kFloat32 : c.dtype;
  HostTensor logits(c.dtype, {c.n, c.e}), weights(wdt, {c.n, c.k}), gw(wdt, {c.n, c.k});
  HostTensor glogits(c.dtype, {c.n, c.e});
  std::mt19937 rng(7);
  logits.fill_normal(rng, 0.0f, 2.0f);
  gw.fill_normal(rng);
  std::vector<std::int64_t> ids(c.n * c.k);
  const TensorView ids_view = TensorView::contiguous(ids.data(), DType::kInt64, {c.n, c.k});
  const tigon::MoeRouterParams params{c.k, c.renormalize};
  tigon::moe_router_fwd(params, logits.view(), ids_view, weights.view());
  tigon::moe_router_bwd(params, gw.view(), logits.view(), ids_view, glogits.view());

  for (std::int64_t t = 0; t < c.n; ++t) {
    std::vector<double> p(c.e);
    double m = -1e300, s = 0;
    for (std::int64_t j = 0; j < c.e; ++j) m = std::max(m, double(logits.get(t, j)));
    for (std::int64_t j = 0; j < c.e; ++j) s += p[j] = std::exp(logits.get(t, j) - m);
    for (double& v : p) v /= s;
    std::vector<std::int64_t> order(c.e);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
    double top = 0;
    for (std::int64_t k = 0; k < c.k; ++k) {
      ASSERT_EQ(ids[t * c.k + k], order[k]) << "row " << t << " rank " << k;
      top += p[order[k]];
    }
    std::vector<double> dp(c.e, 0.0);
    double dot = 0;
    for (std::int64_t k = 0; k < c.k; ++k) dot += gw.get(t, k) * p[order[k]];
    for (std::int64_t k = 0; k < c.k; ++k) {
      const double v = c.renormalize ? p[order[k]] / top : p[order[k]];
      const double got = weights.get(t, k);
      EXPECT_NEAR(got, round_to(wdt, v), 2 * ulp_at(wdt, v) + 1e-6 * v)
          << "weight " << t << "," << k;
      dp[order[k]] = c.renormalize ? gw.get(t, k) / top - dot / (top * top) : gw.get(t, k);
    }
    double sdp = 0;
    for (std::int64_t j = 0; j < c.e; ++j) sdp += dp[j] * p[j];
    for (std::int64_t j = 0; j < c.e; ++j) {
      const double want = p[j] * (dp[j] - sdp);
      EXPECT_NEAR(glogits.get(t, j), want, 2 * ulp_at(c.dtype, want) + 1e-6)
          << "grad_logits " << t << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeRouterCpu,
    ::testing::Values(RouterCase{33, 8, 2, DType::kFloat32, true, true},      // Mixtral
                      RouterCase{33, 8, 2, DType::kBFloat16, true, true},     // Mixtral bf16
                      RouterCase{21, 64, 8, DType::kBFloat16, false, true},   // Qwen3-MoE
                      RouterCase{21, 64, 8, DType::kFloat16, false, false},   // no renorm
                      RouterCase{5, 16, 16, DType::kFloat32, true, false}));  // K = E

TEST(MoeRouterErrors, NameTheArgument) {
  HostTensor logits(DType::kBFloat16, {4, 8}), weights(DType::kFloat32, {4, 2});
  HostTensor half_weights(DType::kFloat16, {4, 2}), glogits(DType::kFloat32, {4, 8});
  std::vector<std::int64_t> ids(8);
  const TensorView idv = TensorView::contiguous(ids.data(), DType::kInt64, {4, 2});
  tigon::moe_router_fwd({2, true}, logits.view(), idv, weights.view());
  expect_error(
      [&] {
        tigon::moe_router_fwd({9, true}, logits.view(), idv, weights.view());
      },
      ErrorCode::kInvalidArgument, "top_k", "[1, 8]", "moe_router");
  expect_error(
      [&] {
        tigon::moe_router_fwd({3, true}, logits.view(), idv, weights.view());
      },
      ErrorCode::kInvalidArgument, "topk_ids", "shape [4, 3]");
  expect_error(
      [&] {
        tigon::moe_router_fwd({2, true}, logits.view(), idv, half_weights.view());
      },
      ErrorCode::kTypeError, "topk_weights", "float32 or bfloat16");
  expect_error(
      [&] {
        tigon::moe_router_bwd({2, true}, weights.view(), logits.view(), idv, glogits.view());
      },
      ErrorCode::kTypeError, "grad_logits", "bfloat16");
}

}  // namespace
