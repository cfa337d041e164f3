// DyT CPU backend against a float64 oracle of include/tigon/ops/dyt.h (every x dtype, float32 or
// x-dtype parameters, with and without beta, in place), and its validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::TensorView;
using tigon::testing::epsilon_of;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;
using tigon::testing::ulp_at;

struct Case {
  DType x_dtype;
  DType p_dtype;
  bool beta;
  bool in_place;
};

std::string case_name(const Case& c) {
  return std::string("x") + tigon::dtype_name(c.x_dtype) + "_p" + tigon::dtype_name(c.p_dtype) +
         (c.beta ? "_beta" : "_nobeta") + (c.in_place ? "_inplace" : "");
}

class DytCpu : public ::testing::TestWithParam<Case> {
 protected:
  void check(std::int64_t rows, std::int64_t hidden, std::int64_t pad = 0) {
    const Case c = GetParam();
    const DType t = c.x_dtype, p = c.p_dtype;
    std::mt19937 rng(static_cast<unsigned>(rows * 13 + hidden));
    const std::int64_t stride = hidden + pad;
    HostTensor x(t, {rows, hidden}, stride), y(t, {rows, hidden}, stride);
    x.fill_normal(rng, 0.0f, 2.0f);
    HostTensor alpha(p, {1}), gamma(p, {hidden}), beta(p, {hidden});
    alpha.set(0, 0, 0.7f);
    gamma.fill_normal(rng, 1.0f, 0.3f);
    beta.fill_normal(rng, 0.0f, 0.3f);
    const TensorView bv = c.beta ? beta.view() : TensorView{};
    tigon::dyt_fwd(x.view(), alpha.view(), gamma.view(), bv, y.view());

    HostTensor dy(t, {rows, hidden}, stride), dx(t, {rows, hidden}, stride);
    dy.fill_normal(rng);
    HostTensor dalpha(p, {1}), dgamma(p, {hidden}), dbeta(p, {hidden});
    std::vector<double> dy_copy(rows * hidden);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j) dy_copy[i * hidden + j] = dy.get(i, j);
    std::vector<std::uint8_t> ws(tigon::dyt_bwd_workspace_size(x.view(), c.beta));
    tigon::dyt_bwd(dy.view(), x.view(), alpha.view(), gamma.view(), bv,
                   c.in_place ? dy.view() : dx.view(), dalpha.view(), dgamma.view(),
                   c.beta ? dbeta.view() : TensorView{}, {ws.data(), ws.size()});
    const HostTensor& dx_out = c.in_place ? dy : dx;

    const double a = alpha.get(0, 0);
    double da = 0.0, da_scale = 0.0;
    std::vector<double> dg(hidden, 0.0), db(hidden, 0.0), dg_scale(hidden, 0.0);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double xv = x.get(i, j), g = gamma.get(0, j), b = c.beta ? beta.get(0, j) : 0.0;
        const double th = std::tanh(a * xv), d = dy_copy[i * hidden + j];
        const double ref = g * th + b;
        // float32 tanhf and products: a few float32 ulps of the terms, then one rounding to T.
        const double tol =
            epsilon_of(t) * std::fabs(ref) + ulp_at(t, ref) + 4e-7 * (std::fabs(g) + std::fabs(b));
        ASSERT_NEAR(y.get(i, j), ref, tol) << "y[" << i << "," << j << "]";
        const double u = (1.0 - th * th) * d * g;
        ASSERT_NEAR(
            dx_out.get(i, j), a * u,
            epsilon_of(t) * std::fabs(a * u) + ulp_at(t, a * u) + 4e-7 * std::fabs(a * d * g))
            << "dx[" << i << "," << j << "]";
        da += xv * u;
        da_scale += std::fabs(xv * d * g);
        dg[j] += d * th;
        dg_scale[j] += std::fabs(d);
        db[j] += d;
      }
    }
    EXPECT_NEAR(dalpha.get(0, 0), da, epsilon_of(p) * std::fabs(da) + 1e-6 * da_scale);
    for (std::int64_t j = 0; j < hidden; ++j) {
      ASSERT_NEAR(dgamma.get(0, j), dg[j], epsilon_of(p) * std::fabs(dg[j]) + 1e-6 * dg_scale[j]);
      if (c.beta) {
        ASSERT_NEAR(dbeta.get(0, j), db[j], epsilon_of(p) * std::fabs(db[j]) + 1e-6 * dg_scale[j]);
      }
    }
    // Same bits as a second run (fixed sum order).
    HostTensor dgamma2(p, {hidden}), dalpha2(p, {1}), dbeta2(p, {hidden}), dx2(t, {rows, hidden});
    HostTensor dy2(t, {rows, hidden}, stride);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j)
        dy2.set(i, j, static_cast<float>(dy_copy[i * hidden + j]));
    tigon::dyt_bwd(dy2.view(), x.view(), alpha.view(), gamma.view(), bv, dx2.view(), dalpha2.view(),
                   dgamma2.view(), c.beta ? dbeta2.view() : TensorView{}, {ws.data(), ws.size()});
    EXPECT_EQ(dalpha2.bits(0, 0), dalpha.bits(0, 0));
    for (std::int64_t j = 0; j < hidden; ++j) ASSERT_EQ(dgamma2.bits(0, j), dgamma.bits(0, j));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j) ASSERT_EQ(dx2.bits(i, j), dx_out.bits(i, j));
  }
};

TEST_P(DytCpu, OddHiddenSizes) {
  for (std::int64_t hidden : {1, 3, 127, 1025}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    check(5, hidden);
  }
}

TEST_P(DytCpu, ManyRowsAndStrides) { check(100, 64, 7); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType x : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const std::vector<DType> params =
        x == DType::kFloat32 ? std::vector<DType>{x} : std::vector<DType>{x, DType::kFloat32};
    for (DType p : params) {
      for (bool beta : {true, false}) {
        for (bool in_place : {false, true}) cases.push_back({x, p, beta, in_place});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, DytCpu, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(DytCpuEmpty, ZeroRowsGiveZeroGradients) {
  HostTensor x(DType::kFloat32, {0, 4}), alpha(DType::kFloat32, {1}), gamma(DType::kFloat32, {4});
  HostTensor dalpha(DType::kFloat32, {1}), dgamma(DType::kFloat32, {4}),
      dbeta(DType::kFloat32, {4});
  dalpha.set(0, 0, 3.0f);
  for (std::int64_t j = 0; j < 4; ++j) dgamma.set(0, j, 3.0f), dbeta.set(0, j, 3.0f);
  tigon::dyt_fwd(x.view(), alpha.view(), gamma.view(), gamma.view(), x.view());
  std::vector<std::uint8_t> ws(tigon::dyt_bwd_workspace_size(x.view(), true));
  tigon::dyt_bwd(x.view(), x.view(), alpha.view(), gamma.view(), gamma.view(), x.view(),
                 dalpha.view(), dgamma.view(), dbeta.view(), {ws.data(), ws.size()});
  EXPECT_EQ(dalpha.get(0, 0), 0.0f);
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(dgamma.get(0, j) + dbeta.get(0, j), 0.0f);
}

TEST(DytErrors, NameTheArgument) {
  HostTensor x(DType::kBFloat16, {2, 8}), y(DType::kBFloat16, {2, 8});
  HostTensor alpha(DType::kFloat32, {1}), gamma(DType::kBFloat16, {8}), beta(DType::kFloat32, {8});
  HostTensor alpha2(DType::kFloat32, {2}), alpha16(DType::kFloat16, {1}),
      gamma4(DType::kBFloat16, {4});
  HostTensor y32(DType::kFloat32, {2, 8});
  const auto fwd = [&](const TensorView& a, const TensorView& g, const TensorView& yv) {
    tigon::dyt_fwd(x.view(), a, g, beta.view(), yv);
  };
  fwd(alpha.view(), gamma.view(), y.view());  // valid
  expect_error([&] { fwd(alpha2.view(), gamma.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "alpha", "one element", "dyt_fwd");
  expect_error([&] { fwd(alpha16.view(), gamma.view(), y.view()); }, ErrorCode::kTypeError, "alpha",
               "(x's) or float32", "dyt_fwd");
  expect_error([&] { fwd(alpha.view(), gamma4.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "gamma", "shape [8]", "dyt_fwd");
  expect_error([&] { fwd(alpha.view(), gamma.view(), y32.view()); }, ErrorCode::kTypeError, "y",
               "dtype bfloat16 (x's dtype)", "dyt_fwd");

  HostTensor dy(DType::kBFloat16, {2, 8}), dx(DType::kBFloat16, {2, 8});
  HostTensor dalpha(DType::kFloat32, {1}), dgamma(DType::kBFloat16, {8}),
      dbeta(DType::kFloat32, {8});
  HostTensor dgamma32(DType::kFloat32, {8});
  std::vector<std::uint8_t> ws(tigon::dyt_bwd_workspace_size(x.view(), true));
  const auto bwd = [&](const TensorView& dg, tigon::Workspace w) {
    tigon::dyt_bwd(dy.view(), x.view(), alpha.view(), gamma.view(), beta.view(), dx.view(),
                   dalpha.view(), dg, dbeta.view(), w);
  };
  bwd(dgamma.view(), {ws.data(), ws.size()});  // valid
  expect_error(
      [&] {
        bwd(dgamma32.view(), {ws.data(), ws.size()});
      },
      ErrorCode::kTypeError, "dgamma", "dtype bfloat16", "dyt_bwd");
  expect_error(
      [&] {
        bwd(dgamma.view(), {ws.data(), 8});
      },
      ErrorCode::kInvalidArgument, "workspace", "dyt_bwd_workspace_size", "dyt_bwd");
}

}  // namespace
