// Gated RMSNorm CPU backend against a float64 oracle of include/tigon/ops/gated_rms_norm.h (every
// x dtype, x-dtype or float32 weights, strided rows, dx or dgate in place into dy), zero rows,
// and bitwise identical gradients run to run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::GatedRmsNormParams;
using tigon::TensorView;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_at;
using tigon::testing::ulp_distance;

enum class InPlace { kNone, kDx, kDgate };

struct Case {
  DType x_dtype;
  DType w_dtype;
  InPlace in_place;
};

std::string case_name(const Case& c) {
  const char* in_place[] = {"", "_dx_inplace", "_dgate_inplace"};
  return std::string("x") + tigon::dtype_name(c.x_dtype) + "_w" + tigon::dtype_name(c.w_dtype) +
         in_place[static_cast<int>(c.in_place)];
}

// The float64 oracle: the header's formula with its roundings (n to T, w * n to promote(T, Tw),
// y to T); everything else exact.
struct Oracle {
  std::vector<double> y, rstd, dx, dgate, dw, dx_scale, dgate_scale, dw_scale;
};

Oracle oracle(const Case& c, float eps, const HostTensor& x, const HostTensor& gate,
              const HostTensor& w, const std::vector<double>& dy) {
  const std::int64_t rows = x.rows(), hidden = x.hidden();
  const DType t = c.x_dtype;
  const DType promoted = c.w_dtype == t ? t : DType::kFloat32;
  Oracle o;
  o.y.resize(rows * hidden);
  o.dx.resize(rows * hidden);
  o.dgate.resize(rows * hidden);
  o.dgate_scale.resize(rows * hidden);
  o.dx_scale.resize(rows);
  o.rstd.resize(rows);
  o.dw.assign(hidden, 0.0);
  o.dw_scale.assign(hidden, 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    double ss = 0.0;
    for (std::int64_t j = 0; j < hidden; ++j) ss += static_cast<double>(x.get(i, j)) * x.get(i, j);
    const double r = 1.0 / std::sqrt(ss / hidden + static_cast<double>(eps));
    o.rstd[i] = r;
    std::vector<double> m(hidden);
    double sum_m_xhat = 0.0;
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double xv = x.get(i, j), g = gate.get(i, j), wv = w.get(0, j), d = dy[i * hidden + j];
      const double n = round_to(t, xv * r);
      const double p = round_to(promoted, wv * n);
      const double s = 1.0 / (1.0 + std::exp(-g));
      const double a = g * s;
      o.y[i * hidden + j] = round_to(t, p * a);
      o.dgate[i * hidden + j] = d * p * s * (1.0 + g * (1.0 - s));
      o.dgate_scale[i * hidden + j] = std::fabs(d * p) * (1.0 + std::fabs(g));
      const double dp = d * a;
      m[j] = dp * wv;
      sum_m_xhat += m[j] * xv * r;
      o.dw[j] += dp * n;
      o.dw_scale[j] += std::fabs(dp * n);
    }
    const double mean = sum_m_xhat / hidden;
    double scale = 0.0;
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double xhat = x.get(i, j) * r;
      o.dx[i * hidden + j] = r * (m[j] - xhat * mean);
      scale = std::max(scale, std::fabs(r * m[j]) + std::fabs(r * xhat * mean));
    }
    o.dx_scale[i] = scale;
  }
  return o;
}

class GatedRmsNormCpu : public ::testing::TestWithParam<Case> {
 protected:
  void check(std::int64_t rows, std::int64_t hidden, std::int64_t pad = 0) {
    const Case c = GetParam();
    const DType t = c.x_dtype;
    GatedRmsNormParams p;
    p.eps = 1e-6f;
    std::mt19937 rng(static_cast<unsigned>(rows * 7919 + hidden));
    const std::int64_t stride = hidden + pad;
    HostTensor x(t, {rows, hidden}, stride), gate(t, {rows, hidden}, stride);
    HostTensor y(t, {rows, hidden}, stride), rstd(DType::kFloat32, {rows});
    x.fill_normal(rng, 0.1f, 2.0f);
    gate.fill_normal(rng, 0.0f, 3.0f);
    HostTensor w(c.w_dtype, {hidden});
    w.fill_normal(rng, 1.0f, 0.3f);
    HostTensor dy(t, {rows, hidden}, stride);
    dy.fill_normal(rng);
    std::vector<double> dy_copy(rows * hidden);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j) dy_copy[i * hidden + j] = dy.get(i, j);
    const Oracle o = oracle(c, p.eps, x, gate, w, dy_copy);

    tigon::gated_rms_norm_fwd(p, x.view(), gate.view(), w.view(), y.view(), rstd.view());
    std::int64_t exact = 0, worst = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      EXPECT_NEAR(rstd.get(0, i), o.rstd[i], 2e-6 * o.rstd[i]) << "rstd row " << i;
      for (std::int64_t j = 0; j < hidden; ++j) {
        const std::int64_t d = ulp_distance(t, y.get(i, j), o.y[i * hidden + j]);
        exact += d == 0;
        worst = std::max(worst, d);
      }
    }
    // 16-bit: a flip of n's rounding (float32 vs float64 rstd) moves y by at most 1 ulp. float32:
    // a few ulps of the float32 products and silu.
    EXPECT_LE(worst, t == DType::kFloat32 ? 8 : 1) << "ulps of y from the oracle";
    if (t != DType::kFloat32) {
      EXPECT_GE(static_cast<double>(exact) / (rows * hidden), rows * hidden >= 1000 ? 0.99 : 0.9)
          << "bitwise-equal fraction";
    }

    HostTensor dx(t, {rows, hidden}, stride), dgate(t, {rows, hidden}, stride);
    HostTensor dw(c.w_dtype, {hidden});
    std::vector<std::uint8_t> ws(tigon::gated_rms_norm_bwd_workspace_size(p, x.view(), w.view()));
    const TensorView dxv = c.in_place == InPlace::kDx ? dy.view() : dx.view();
    const TensorView dgv = c.in_place == InPlace::kDgate ? dy.view() : dgate.view();
    tigon::gated_rms_norm_bwd(p, dy.view(), x.view(), gate.view(), w.view(), rstd.view(), dxv, dgv,
                              dw.view(), {ws.data(), ws.size()});
    const HostTensor& dx_out = c.in_place == InPlace::kDx ? dy : dx;
    const HostTensor& dg_out = c.in_place == InPlace::kDgate ? dy : dgate;
    const double tx = epsilon_of(t);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const std::int64_t k = i * hidden + j;
        ASSERT_NEAR(dx_out.get(i, j), o.dx[k], tx * std::fabs(o.dx[k]) + 2e-5 * o.dx_scale[i])
            << "dx[" << i << "," << j << "]";
        // p is rounded in the forward: a flip of n moves it by an ulp of T. ulp_at covers
        // float16's subnormal range.
        ASSERT_NEAR(
            dg_out.get(i, j), o.dgate[k],
            2 * tx * std::fabs(o.dgate[k]) + (tx + 1e-6) * o.dgate_scale[k] + ulp_at(t, o.dgate[k]))
            << "dgate[" << i << "," << j << "]";
      }
    }
    for (std::int64_t j = 0; j < hidden; ++j) {
      ASSERT_NEAR(dw.get(0, j), o.dw[j],
                  epsilon_of(c.w_dtype) * std::fabs(o.dw[j]) + 1e-5 * o.dw_scale[j])
          << "dw[" << j << "]";
    }

    // Same bits as a second run (fixed sum order), out of place.
    HostTensor dy2(t, {rows, hidden}, stride), dx2(t, {rows, hidden}), dg2(t, {rows, hidden});
    HostTensor dw2(c.w_dtype, {hidden});
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < hidden; ++j)
        dy2.set(i, j, static_cast<float>(dy_copy[i * hidden + j]));
    tigon::gated_rms_norm_bwd(p, dy2.view(), x.view(), gate.view(), w.view(), rstd.view(),
                              dx2.view(), dg2.view(), dw2.view(), {ws.data(), ws.size()});
    for (std::int64_t j = 0; j < hidden; ++j) ASSERT_EQ(dw2.bits(0, j), dw.bits(0, j));
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        ASSERT_EQ(dx2.bits(i, j), dx_out.bits(i, j));
        ASSERT_EQ(dg2.bits(i, j), dg_out.bits(i, j));
      }
    }
  }
};

TEST_P(GatedRmsNormCpu, OddHiddenSizes) {
  for (std::int64_t hidden : {1, 3, 127, 1025}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    check(5, hidden);
  }
}

TEST_P(GatedRmsNormCpu, ManyRowsAndStrides) { check(300, 128, 7); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType x : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const std::vector<DType> weights =
        x == DType::kFloat32 ? std::vector<DType>{x} : std::vector<DType>{x, DType::kFloat32};
    for (DType w : weights) {
      for (InPlace ip : {InPlace::kNone, InPlace::kDx, InPlace::kDgate})
        cases.push_back({x, w, ip});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, GatedRmsNormCpu, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(GatedRmsNormCpuEmpty, ZeroRowsGiveZeroWeightGradient) {
  const DType f = DType::kFloat32;
  HostTensor x(f, {0, 4}), w(f, {4}), rstd(f, {0}), dw(f, {4});
  for (std::int64_t j = 0; j < 4; ++j) dw.set(0, j, 3.0f);
  const GatedRmsNormParams p;
  tigon::gated_rms_norm_fwd(p, x.view(), x.view(), w.view(), x.view(), rstd.view());
  std::vector<std::uint8_t> ws(tigon::gated_rms_norm_bwd_workspace_size(p, x.view(), w.view()));
  HostTensor dx(f, {0, 4}), dgate(f, {0, 4});
  tigon::gated_rms_norm_bwd(p, x.view(), x.view(), x.view(), w.view(), rstd.view(), dx.view(),
                            dgate.view(), dw.view(), {ws.data(), ws.size()});
  for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(dw.get(0, j), 0.0f);
}

}  // namespace
