// PolyNorm CPU backend against a float64 oracle of include/tigon/ops/poly_norm.h (every x dtype,
// float32 or x-dtype parameters, in place, odd hidden sizes, strided rows, a row of zeros, zero
// rows). The oracle takes the powers rounded to T as the spec does; everything after is float64.
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
using tigon::TensorView;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_at;

constexpr float kEps = 1e-6f;

struct Case {
  DType x_dtype;
  DType p_dtype;
  bool in_place;
};

std::string case_name(const Case& c) {
  return std::string("x") + tigon::dtype_name(c.x_dtype) + "_p" + tigon::dtype_name(c.p_dtype) +
         (c.in_place ? "_inplace" : "");
}

// The powers of the spec: x, round_T(x * x), round_T(x * x * x) with float32 products.
void powers(DType t, double xv, double p[3]) {
  const float xf = static_cast<float>(xv);
  p[0] = xf;
  p[1] = round_to(t, xf * xf);
  p[2] = round_to(t, xf * xf * xf);
}

class PolyNormCpu : public ::testing::TestWithParam<Case> {
 protected:
  void check(std::int64_t rows, std::int64_t hidden, std::int64_t pad = 0) {
    const Case c = GetParam();
    const DType t = c.x_dtype, pd = c.p_dtype;
    std::mt19937 rng(static_cast<unsigned>(rows * 13 + hidden));
    const std::int64_t stride = hidden + pad;
    HostTensor x(t, {rows, hidden}, stride), y(t, {rows, hidden}, stride);
    x.fill_normal(rng, 0.0f, 1.5f);
    for (std::int64_t j = 0; j < hidden; ++j) x.set(0, j, 0.0f);  // a row of zeros: y = b
    HostTensor weight(pd, {3}), bias(pd, {1});
    weight.set(0, 0, 0.4f);
    weight.set(0, 1, -0.3f);
    weight.set(0, 2, 0.9f);
    bias.set(0, 0, 0.25f);
    tigon::poly_norm_fwd(x.view(), weight.view(), bias.view(), y.view(), kEps);

    HostTensor dy(t, {rows, hidden}, stride), dx(t, {rows, hidden}, stride);
    dy.fill_normal(rng);
    HostTensor dweight(pd, {3}), dbias(pd, {1});
    std::vector<double> dy_copy(rows * hidden);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j) dy_copy[i * hidden + j] = dy.get(i, j);
    std::vector<std::uint8_t> ws(tigon::poly_norm_bwd_workspace_size(x.view()));
    tigon::poly_norm_bwd(dy.view(), x.view(), weight.view(), bias.view(),
                         c.in_place ? dy.view() : dx.view(), dweight.view(), dbias.view(), kEps,
                         {ws.data(), ws.size()});
    const HostTensor& dx_out = c.in_place ? dy : dx;

    // w[k] multiplies norm(p_{k+1})... in the spec's order: w0 the cube's, w2 x's.
    const double w[3] = {weight.get(0, 2), weight.get(0, 1), weight.get(0, 0)};  // by power - 1
    const double b = bias.get(0, 0);
    double dw[3] = {}, dw_scale[3] = {}, db = 0.0, db_scale = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) {
      std::vector<double> p(3 * hidden);
      double ss[3] = {}, s[3] = {}, sabs[3] = {}, r[3], c3[3], c3abs[3];
      for (std::int64_t j = 0; j < hidden; ++j) {
        powers(t, x.get(i, j), &p[3 * j]);
        const double d = dy_copy[i * hidden + j];
        for (int k = 0; k < 3; ++k) {
          ss[k] += p[3 * j + k] * p[3 * j + k];
          s[k] += d * p[3 * j + k];
          sabs[k] += std::fabs(d * p[3 * j + k]);
        }
      }
      for (int k = 0; k < 3; ++k) {
        r[k] = 1.0 / std::sqrt(ss[k] / static_cast<double>(hidden) + static_cast<double>(kEps));
        c3[k] = r[k] * r[k] * r[k] * s[k] / static_cast<double>(hidden);
        c3abs[k] = r[k] * r[k] * r[k] * sabs[k] / static_cast<double>(hidden);
        dw[k] += r[k] * s[k];
        dw_scale[k] += r[k] * sabs[k];
      }
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double xv = x.get(i, j), d = dy_copy[i * hidden + j];
        double ref = b, scale = std::fabs(b), g = 0.0, gscale = 0.0;
        for (int k = 0; k < 3; ++k) {
          const double pk = p[3 * j + k];
          ref += w[k] * pk * r[k];
          scale += std::fabs(w[k] * pk * r[k]);
          const double dpow = (k + 1) * std::pow(xv, k);  // d p_k / dx
          g += w[k] * dpow * (r[k] * d - pk * c3[k]);
          gscale += std::fabs(w[k] * dpow) * (r[k] * std::fabs(d) + std::fabs(pk) * c3abs[k]);
        }
        db += d;
        db_scale += std::fabs(d);
        // float32 rstd and products: a few float32 ulps of the terms, then one rounding to T.
        ASSERT_NEAR(y.get(i, j), ref,
                    epsilon_of(t) * std::fabs(ref) + ulp_at(t, ref) + 2e-6 * scale)
            << "y[" << i << "," << j << "]";
        if (i == 0) ASSERT_EQ(y.get(i, j), round_to(t, b)) << "zero row y[" << j << "]";
        // float32 row sums of dy * p_k: their error scales with the sums of magnitudes.
        ASSERT_NEAR(dx_out.get(i, j), g,
                    epsilon_of(t) * std::fabs(g) + ulp_at(t, g) + 1e-5 * gscale)
            << "dx[" << i << "," << j << "]";
      }
    }
    // dweight in the API's order: [0] the cube's.
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(dweight.get(0, 2 - k), dw[k],
                  epsilon_of(pd) * std::fabs(dw[k]) + 1e-5 * dw_scale[k])
          << "dweight[" << 2 - k << "]";
    }
    EXPECT_NEAR(dbias.get(0, 0), db, epsilon_of(pd) * std::fabs(db) + 1e-6 * db_scale);

    // Same bits as a second run (fixed sum order).
    HostTensor dweight2(pd, {3}), dbias2(pd, {1}), dx2(t, {rows, hidden});
    HostTensor dy2(t, {rows, hidden}, stride);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j)
        dy2.set(i, j, static_cast<float>(dy_copy[i * hidden + j]));
    tigon::poly_norm_bwd(dy2.view(), x.view(), weight.view(), bias.view(), dx2.view(),
                         dweight2.view(), dbias2.view(), kEps, {ws.data(), ws.size()});
    EXPECT_EQ(dbias2.bits(0, 0), dbias.bits(0, 0));
    for (std::int64_t k = 0; k < 3; ++k) ASSERT_EQ(dweight2.bits(0, k), dweight.bits(0, k));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j) ASSERT_EQ(dx2.bits(i, j), dx_out.bits(i, j));
  }
};

TEST_P(PolyNormCpu, OddHiddenSizes) {
  for (std::int64_t hidden : {1, 3, 127, 1025}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    check(5, hidden);
  }
}

TEST_P(PolyNormCpu, ManyRowsAndStrides) { check(100, 64, 7); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType x : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const std::vector<DType> params =
        x == DType::kFloat32 ? std::vector<DType>{x} : std::vector<DType>{x, DType::kFloat32};
    for (DType p : params) {
      for (bool in_place : {false, true}) cases.push_back({x, p, in_place});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, PolyNormCpu, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(PolyNormCpuEmpty, ZeroRowsGiveZeroGradients) {
  HostTensor x(DType::kFloat32, {0, 4}), weight(DType::kFloat32, {3}), bias(DType::kFloat32, {1});
  HostTensor dweight(DType::kFloat32, {3}), dbias(DType::kFloat32, {1});
  dbias.set(0, 0, 3.0f);
  for (std::int64_t k = 0; k < 3; ++k) dweight.set(0, k, 3.0f);
  tigon::poly_norm_fwd(x.view(), weight.view(), bias.view(), x.view(), kEps);
  std::vector<std::uint8_t> ws(tigon::poly_norm_bwd_workspace_size(x.view()));
  tigon::poly_norm_bwd(x.view(), x.view(), weight.view(), bias.view(), x.view(), dweight.view(),
                       dbias.view(), kEps, {ws.data(), ws.size()});
  EXPECT_EQ(dbias.get(0, 0), 0.0f);
  for (std::int64_t k = 0; k < 3; ++k) EXPECT_EQ(dweight.get(0, k), 0.0f);
}

}  // namespace
