// LayerNorm CPU backend against a float64 oracle of the documented formula: every x dtype, weight
// and bias each absent, in x's dtype or float32, in place / out of place, odd hidden sizes,
// strided rows, a large mean, NaN rows, empty inputs and bitwise-reproducible dW / dB.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::LayerNormParams;
using tigon::TensorView;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_distance;

struct Case {
  DType x_dtype;
  std::optional<DType> w_dtype;  // nullopt: no weight
  std::optional<DType> b_dtype;  // nullopt: no bias
  bool in_place;
};

std::string case_name(const Case& c) {
  std::string s = std::string("x") + tigon::dtype_name(c.x_dtype);
  s += c.w_dtype ? std::string("_w") + tigon::dtype_name(*c.w_dtype) : "_now";
  s += c.b_dtype ? std::string("_b") + tigon::dtype_name(*c.b_dtype) : "_nob";
  return s + (c.in_place ? "_inplace" : "");
}

// The float64 oracle of include/tigon/ops/layer_norm.h, with the one rounding of y.
struct Oracle {
  std::vector<double> y, y_scale, mean, rstd, dx, dx_scale, dw, dw_scale, db, db_scale;
};

Oracle oracle(DType t, float eps, const HostTensor& x, const HostTensor* w, const HostTensor* b,
              const HostTensor& dy) {
  const std::int64_t rows = x.rows(), hidden = x.hidden();
  Oracle o;
  o.y.resize(rows * hidden);
  o.y_scale.resize(rows * hidden);
  o.dx.resize(rows * hidden);
  o.dx_scale.resize(rows);
  o.mean.resize(rows);
  o.rstd.resize(rows);
  for (auto* v : {&o.dw, &o.dw_scale, &o.db, &o.db_scale}) v->assign(hidden, 0.0);
  auto wv = [&](std::int64_t j) { return w ? static_cast<double>(w->get(0, j)) : 1.0; };
  auto bv = [&](std::int64_t j) { return b ? static_cast<double>(b->get(0, j)) : 0.0; };
  for (std::int64_t i = 0; i < rows; ++i) {
    double sum = 0.0, sq = 0.0;
    for (std::int64_t j = 0; j < hidden; ++j) sum += x.get(i, j);
    const double mean = sum / hidden;
    for (std::int64_t j = 0; j < hidden; ++j) sq += (x.get(i, j) - mean) * (x.get(i, j) - mean);
    const double r = 1.0 / std::sqrt(sq / hidden + static_cast<double>(eps));
    o.mean[i] = mean;
    o.rstd[i] = r;
    double sum_g_xhat = 0.0, sum_g = 0.0;
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double xhat = (x.get(i, j) - mean) * r, g = dy.get(i, j) * wv(j);
      o.y[i * hidden + j] = round_to(t, xhat * wv(j) + bv(j));
      o.y_scale[i * hidden + j] = std::fabs(xhat * wv(j)) + std::fabs(bv(j)) + std::fabs(wv(j));
      sum_g_xhat += g * xhat;
      sum_g += g;
      o.dw[j] += dy.get(i, j) * xhat;
      o.dw_scale[j] += std::fabs(dy.get(i, j) * xhat);
      o.db[j] += dy.get(i, j);
      o.db_scale[j] += std::fabs(dy.get(i, j));
    }
    const double c1 = sum_g_xhat / hidden, c2 = sum_g / hidden;
    double scale = 0.0;
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double xhat = (x.get(i, j) - mean) * r, g = dy.get(i, j) * wv(j);
      o.dx[i * hidden + j] = r * ((g - c2) - xhat * c1);
      scale = std::max(scale, r * (std::fabs(g) + std::fabs(c2) + std::fabs(xhat * c1)));
    }
    o.dx_scale[i] = scale;
  }
  return o;
}

class LayerNormCpu : public ::testing::TestWithParam<Case> {
 protected:
  void check(std::int64_t rows, std::int64_t hidden, std::int64_t row_stride_pad = 0,
             float x_mean = 0.1f, int misalign = 0) {
    const Case c = GetParam();
    LayerNormParams p;
    p.eps = 1e-5f;
    std::mt19937 rng(static_cast<unsigned>(rows * 7919 + hidden));
    const std::int64_t stride = hidden + row_stride_pad;
    HostTensor x(c.x_dtype, {rows, hidden}, stride);
    x.fill_normal(rng, x_mean, 2.0f);
    HostTensor w(c.w_dtype.value_or(c.x_dtype), {hidden});
    w.fill_normal(rng, 1.0f, 0.3f);
    HostTensor b(c.b_dtype.value_or(c.x_dtype), {hidden});
    b.fill_normal(rng, 0.0f, 0.5f);
    HostTensor y(c.x_dtype, {rows, hidden}, stride);
    HostTensor mean(DType::kFloat32, {rows}), rstd(DType::kFloat32, {rows});
    HostTensor dy(c.x_dtype, {rows, hidden}, stride);
    dy.fill_normal(rng);
    const Oracle o =
        oracle(c.x_dtype, p.eps, x, c.w_dtype ? &w : nullptr, c.b_dtype ? &b : nullptr, dy);

    const TensorView wv = c.w_dtype ? w.view() : TensorView{};
    const TensorView bv = c.b_dtype ? b.view() : TensorView{};
    tigon::layer_norm_fwd(p, x.view(misalign), wv, bv, y.view(misalign), mean.view(), rstd.view());
    if (misalign) return;  // values are checked by the aligned run; this one checks it runs

    // y: at most 1 ulp of its dtype from the float64 result rounded once, bitwise on >= 99% of
    // 16-bit elements; or, where the result cancels (xhat * w ~ -b), within float32 rounding of
    // its terms.
    std::int64_t exact = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      EXPECT_NEAR(mean.get(0, i), o.mean[i], 1e-6 * (std::fabs(o.mean[i]) + 1.0 / o.rstd[i]))
          << "mean row " << i;
      EXPECT_NEAR(rstd.get(0, i), o.rstd[i], 2e-6 * o.rstd[i]) << "rstd row " << i;
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double ref = o.y[i * hidden + j], got = y.get(i, j);
        const std::int64_t d = ulp_distance(c.x_dtype, got, ref);
        exact += d == 0;
        const double float32_rounding = 8 * epsilon_of(DType::kFloat32) * o.y_scale[i * hidden + j];
        EXPECT_TRUE(d <= (c.x_dtype == DType::kFloat32 ? 64 : 1) ||
                    std::fabs(got - ref) <=
                        float32_rounding + 1e-6 * o.y_scale[i * hidden + j] * std::fabs(x_mean))
            << "y[" << i << "," << j << "] = " << got << ", oracle " << ref;
      }
    }
    if (c.x_dtype != DType::kFloat32) {
      EXPECT_GE(static_cast<double>(exact) / (rows * hidden), rows * hidden >= 1000 ? 0.99 : 0.9)
          << "bitwise-equal fraction";
    }

    // Backward, out of place or into dy's buffer; db is asked for exactly when there is a bias.
    HostTensor dx(c.x_dtype, {rows, hidden}, stride);
    HostTensor dw(c.w_dtype.value_or(c.x_dtype), {hidden});
    HostTensor db(c.b_dtype.value_or(c.x_dtype), {hidden});
    std::vector<std::uint8_t> workspace(tigon::layer_norm_bwd_workspace_size(
        p, x.view(), c.w_dtype.has_value(), c.b_dtype.has_value()));
    const TensorView dx_view = c.in_place ? dy.view() : dx.view();
    tigon::layer_norm_bwd(p, dy.view(), x.view(), wv, mean.view(), rstd.view(), dx_view,
                          c.w_dtype ? dw.view() : TensorView{},
                          c.b_dtype ? db.view() : TensorView{},
                          {workspace.data(), workspace.size()});
    const HostTensor& dx_out = c.in_place ? dy : dx;
    const double tx = epsilon_of(c.x_dtype);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double ref = o.dx[i * hidden + j];
        ASSERT_NEAR(dx_out.get(i, j), ref, tx * std::fabs(ref) + 2e-5 * o.dx_scale[i])
            << "dx[" << i << "," << j << "]";
      }
    }
    for (std::int64_t j = 0; c.w_dtype && j < hidden; ++j) {
      ASSERT_NEAR(dw.get(0, j), o.dw[j],
                  epsilon_of(*c.w_dtype) * std::fabs(o.dw[j]) + 1e-5 * o.dw_scale[j])
          << "dw[" << j << "]";
    }
    for (std::int64_t j = 0; c.b_dtype && j < hidden; ++j) {
      ASSERT_NEAR(db.get(0, j), o.db[j],
                  epsilon_of(*c.b_dtype) * std::fabs(o.db[j]) + 1e-6 * o.db_scale[j])
          << "db[" << j << "]";
    }
  }
};

TEST_P(LayerNormCpu, OddHiddenSizes) {
  for (std::int64_t hidden : {1, 3, 127, 4097}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    check(5, hidden);
  }
}

TEST_P(LayerNormCpu, ManyRows) { check(300, 256); }

// Two passes keep the variance accurate where E[x^2] - E[x]^2 would cancel.
TEST_P(LayerNormCpu, LargeMean) { check(40, 512, 0, 300.0f); }

TEST_P(LayerNormCpu, StridedRows) { check(9, 130, 17); }

TEST_P(LayerNormCpu, UnalignedPointers) { check(4, 100, 3, 0.1f, 1); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (DType xt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    // Each parameter: absent, in x's dtype, or float32 (the same thing for float32 x).
    std::vector<std::optional<DType>> parameter_dtypes = {std::nullopt, xt};
    if (xt != DType::kFloat32) parameter_dtypes.push_back(DType::kFloat32);
    for (bool in_place : {false, true}) {
      for (std::optional<DType> wt : parameter_dtypes) {
        for (std::optional<DType> bt : parameter_dtypes) {
          // Mixed weight and bias dtypes are accepted; once each is enough.
          if (wt && bt && *wt != *bt && in_place) continue;
          cases.push_back({xt, wt, bt, in_place});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, LayerNormCpu, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(LayerNormCpuEdge, NanRowsStayInTheirRowsAndConstantRowsGiveTheBias) {
  const std::int64_t rows = 3, hidden = 33;
  HostTensor x(DType::kBFloat16, {rows, hidden});
  std::mt19937 rng(5);
  x.fill_normal(rng);
  x.set(1, 7, std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t j = 0; j < hidden; ++j) x.set(2, j, 4.0f);
  HostTensor w(DType::kFloat32, {hidden}), b(DType::kFloat32, {hidden});
  w.fill_normal(rng, 1.0f, 0.1f);
  b.fill_normal(rng, 0.0f, 1.0f);
  HostTensor y(DType::kBFloat16, {rows, hidden});
  HostTensor mean(DType::kFloat32, {rows}), rstd(DType::kFloat32, {rows});
  tigon::layer_norm_fwd({}, x.view(), w.view(), b.view(), y.view(), mean.view(), rstd.view());
  for (std::int64_t j = 0; j < hidden; ++j) {
    EXPECT_TRUE(std::isfinite(y.get(0, j)));
    EXPECT_TRUE(std::isnan(y.get(1, j)));
    EXPECT_EQ(y.get(2, j), round_to(DType::kBFloat16, b.get(0, j)));  // x - mean = 0 exactly
  }
  EXPECT_EQ(mean.get(0, 2), 4.0f);
  EXPECT_EQ(rstd.get(0, 2), 1.0f / std::sqrt(1e-5f));
}

TEST(LayerNormCpuEdge, ZeroRowsGivesZeroParameterGradients) {
  const std::int64_t hidden = 8;
  HostTensor x(DType::kFloat32, {0, hidden}), y(DType::kFloat32, {0, hidden});
  HostTensor mean(DType::kFloat32, {0}), rstd(DType::kFloat32, {0});
  HostTensor w(DType::kFloat32, {hidden});
  LayerNormParams p;
  tigon::layer_norm_fwd(p, x.view(), w.view(), {}, y.view(), mean.view(), rstd.view());
  HostTensor dw(DType::kFloat32, {hidden}), db(DType::kFloat32, {hidden});
  for (std::int64_t j = 0; j < hidden; ++j) dw.set(0, j, 3.0f), db.set(0, j, 3.0f);
  HostTensor dy(DType::kFloat32, {0, hidden}), dx(DType::kFloat32, {0, hidden});
  const std::size_t bytes = tigon::layer_norm_bwd_workspace_size(p, x.view(), true, true);
  std::vector<std::uint8_t> workspace(bytes + 1);
  tigon::layer_norm_bwd(p, dy.view(), x.view(), w.view(), mean.view(), rstd.view(), dx.view(),
                        dw.view(), db.view(), {workspace.data(), bytes});
  for (std::int64_t j = 0; j < hidden; ++j) {
    EXPECT_EQ(dw.get(0, j), 0.0f);
    EXPECT_EQ(db.get(0, j), 0.0f);
  }
}

TEST(LayerNormCpuEdge, ParameterGradientsAreBitwiseReproducible) {
  const std::int64_t rows = 1000, hidden = 300;
  std::mt19937 rng(11);
  HostTensor x(DType::kBFloat16, {rows, hidden}), dy(DType::kBFloat16, {rows, hidden});
  x.fill_normal(rng);
  dy.fill_normal(rng);
  HostTensor w(DType::kFloat32, {hidden});
  w.fill_normal(rng, 1.0f, 0.2f);
  LayerNormParams p;
  HostTensor y(DType::kBFloat16, {rows, hidden});
  HostTensor mean(DType::kFloat32, {rows}), rstd(DType::kFloat32, {rows});
  tigon::layer_norm_fwd(p, x.view(), w.view(), {}, y.view(), mean.view(), rstd.view());
  std::vector<std::uint8_t> workspace(
      tigon::layer_norm_bwd_workspace_size(p, x.view(), true, true));
  std::vector<std::uint32_t> first;
  for (int run = 0; run < 3; ++run) {
    HostTensor dx(DType::kBFloat16, {rows, hidden});
    HostTensor dw(DType::kFloat32, {hidden}), db(DType::kBFloat16, {hidden});
    tigon::layer_norm_bwd(p, dy.view(), x.view(), w.view(), mean.view(), rstd.view(), dx.view(),
                          dw.view(), db.view(), {workspace.data(), workspace.size()});
    std::vector<std::uint32_t> bits;
    for (std::int64_t j = 0; j < hidden; ++j) bits.push_back(dw.bits(0, j));
    for (std::int64_t j = 0; j < hidden; ++j) bits.push_back(db.bits(0, j));
    if (run == 0) first = bits;
    EXPECT_EQ(bits, first);
  }
}

}  // namespace
