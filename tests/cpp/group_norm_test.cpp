// GroupNorm CPU backend against a float64 oracle of the documented formula: every x dtype, weight
// and bias absent / in x's dtype / float32, group counts from 1 to C, [N, C] and [N, C, S] inputs,
// padded samples, dx in place, and bitwise-reproducible results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::GroupNormParams;
using tigon::TensorView;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_distance;

struct Shape {
  std::int64_t n, c, groups, s, pad;  // pad: extra elements between samples
};

struct Case {
  DType x_dtype;
  std::optional<DType> w_dtype;  // nullopt: no weight
  std::optional<DType> b_dtype;  // nullopt: no bias
};

std::string case_name(const Case& c) {
  std::string s = std::string("x") + tigon::dtype_name(c.x_dtype);
  s += c.w_dtype ? std::string("_w") + tigon::dtype_name(*c.w_dtype) : "_now";
  return s + (c.b_dtype ? std::string("_b") + tigon::dtype_name(*c.b_dtype) : "_nob");
}

// A [N, C * S] host tensor (row stride = sample stride) viewed as [N, C, S].
TensorView as_ncs(HostTensor& t, const Shape& sh) {
  TensorView v = t.view();
  v.ndim = 3;
  v.sizes[0] = sh.n;
  v.sizes[1] = sh.c;
  v.sizes[2] = sh.s;
  v.strides[0] = sh.c * sh.s + sh.pad;
  v.strides[1] = sh.s;
  v.strides[2] = 1;
  return v;
}

struct Oracle {
  std::vector<double> y, y_scale, mean, rstd, dx, dx_scale, dw, dw_scale, db, db_scale;
};

Oracle oracle(const Shape& sh, DType t, float eps, const HostTensor& x, const HostTensor* w,
              const HostTensor* b, const HostTensor& dy) {
  const std::int64_t per = sh.c / sh.groups, length = per * sh.s, m = sh.c * sh.s;
  Oracle o;
  for (auto* v : {&o.y, &o.y_scale, &o.dx, &o.dx_scale}) v->assign(sh.n * m, 0.0);
  for (auto* v : {&o.dw, &o.dw_scale, &o.db, &o.db_scale}) v->assign(sh.c, 0.0);
  auto wv = [&](std::int64_t c) { return w ? static_cast<double>(w->get(0, c)) : 1.0; };
  auto bv = [&](std::int64_t c) { return b ? static_cast<double>(b->get(0, c)) : 0.0; };
  for (std::int64_t n = 0; n < sh.n; ++n) {
    for (std::int64_t g = 0; g < sh.groups; ++g) {
      const std::int64_t first = g * length;
      double sum = 0.0, sq = 0.0;
      for (std::int64_t j = first; j < first + length; ++j) sum += x.get(n, j);
      const double mean = sum / length;
      for (std::int64_t j = first; j < first + length; ++j) {
        sq += (x.get(n, j) - mean) * (x.get(n, j) - mean);
      }
      const double r = 1.0 / std::sqrt(sq / length + static_cast<double>(eps));
      o.mean.push_back(mean);
      o.rstd.push_back(r);
      double c1 = 0.0, c2 = 0.0;
      for (std::int64_t j = first; j < first + length; ++j) {
        const std::int64_t c = j / sh.s;
        const double xhat = (x.get(n, j) - mean) * r;
        o.y[n * m + j] = round_to(t, xhat * wv(c) + bv(c));
        o.y_scale[n * m + j] = std::fabs(xhat * wv(c)) + std::fabs(bv(c)) + std::fabs(wv(c));
        c1 += dy.get(n, j) * wv(c) * xhat / length;
        c2 += dy.get(n, j) * wv(c) / length;
        o.dw[c] += dy.get(n, j) * xhat;
        o.dw_scale[c] += std::fabs(dy.get(n, j) * xhat);
        o.db[c] += dy.get(n, j);
        o.db_scale[c] += std::fabs(dy.get(n, j));
      }
      for (std::int64_t j = first; j < first + length; ++j) {
        const double xhat = (x.get(n, j) - mean) * r, gj = dy.get(n, j) * wv(j / sh.s);
        o.dx[n * m + j] = r * ((gj - c2) - xhat * c1);
        o.dx_scale[n * m + j] = r * (std::fabs(gj) + std::fabs(c2) + std::fabs(xhat * c1));
      }
    }
  }
  return o;
}

class GroupNormCpu : public ::testing::TestWithParam<Case> {
 protected:
  void check(const Shape& sh) {
    const Case c = GetParam();
    GroupNormParams p;
    p.groups = sh.groups;
    p.eps = 1e-5f;
    std::mt19937 rng(static_cast<unsigned>(sh.n * 7919 + sh.c * 31 + sh.s));
    const std::int64_t m = sh.c * sh.s, stride = m + sh.pad;
    HostTensor x(c.x_dtype, {sh.n, m}, stride), y(c.x_dtype, {sh.n, m}, stride);
    HostTensor dy(c.x_dtype, {sh.n, m}, stride), dx(c.x_dtype, {sh.n, m}, stride);
    x.fill_normal(rng, 0.3f, 2.0f);
    dy.fill_normal(rng);
    HostTensor w(c.w_dtype.value_or(c.x_dtype), {sh.c}), b(c.b_dtype.value_or(c.x_dtype), {sh.c});
    w.fill_normal(rng, 1.0f, 0.3f);
    b.fill_normal(rng, 0.0f, 0.5f);
    HostTensor mean(DType::kFloat32, {sh.n * sh.groups}), rstd(DType::kFloat32, {sh.n * sh.groups});
    HostTensor dw(c.w_dtype.value_or(c.x_dtype), {sh.c}), db(c.b_dtype.value_or(c.x_dtype), {sh.c});
    const Oracle o =
        oracle(sh, c.x_dtype, p.eps, x, c.w_dtype ? &w : nullptr, c.b_dtype ? &b : nullptr, dy);
    const TensorView wv = c.w_dtype ? w.view() : TensorView{};
    const TensorView bv = c.b_dtype ? b.view() : TensorView{};
    tigon::group_norm_fwd(p, as_ncs(x, sh), wv, bv, as_ncs(y, sh), mean.view(), rstd.view());

    const double eps16 = epsilon_of(c.x_dtype);
    std::int64_t exact = 0;
    for (std::int64_t i = 0; i < sh.n * sh.groups; ++i) {
      EXPECT_NEAR(mean.get(0, i), o.mean[i], 1e-6 * (std::fabs(o.mean[i]) + 1.0 / o.rstd[i]));
      EXPECT_NEAR(rstd.get(0, i), o.rstd[i], 2e-6 * o.rstd[i]) << "rstd " << i;
    }
    for (std::int64_t n = 0; n < sh.n; ++n) {
      for (std::int64_t j = 0; j < m; ++j) {
        const double ref = o.y[n * m + j], got = y.get(n, j);
        const std::int64_t d = ulp_distance(c.x_dtype, got, ref);
        exact += d == 0;
        EXPECT_TRUE(d <= (c.x_dtype == DType::kFloat32 ? 64 : 1) ||
                    std::fabs(got - ref) <= 8 * epsilon_of(DType::kFloat32) * o.y_scale[n * m + j])
            << "y[" << n << "," << j << "] = " << got << ", oracle " << ref;
      }
    }
    if (c.x_dtype != DType::kFloat32 && sh.n * m >= 1000) {
      EXPECT_GE(static_cast<double>(exact) / (sh.n * m), 0.99) << "bitwise-equal fraction";
    }

    // Backward: out of place, then in place into a copy of dy (the same bits), then again.
    auto run_bwd = [&](HostTensor& dx_out, HostTensor& dy_in, HostTensor& dw_out,
                       HostTensor& db_out) {
      std::vector<std::uint8_t> ws(tigon::group_norm_bwd_workspace_size(p, as_ncs(x, sh)));
      tigon::group_norm_bwd(p, as_ncs(dy_in, sh), as_ncs(x, sh), wv, mean.view(), rstd.view(),
                            as_ncs(dx_out, sh), c.w_dtype ? dw_out.view() : TensorView{},
                            db_out.view(), {ws.data(), ws.size()});
    };
    run_bwd(dx, dy, dw, db);
    for (std::int64_t n = 0; n < sh.n; ++n) {
      for (std::int64_t j = 0; j < m; ++j) {
        const double ref = o.dx[n * m + j], got = dx.get(n, j);
        EXPECT_NEAR(got, ref, eps16 * std::fabs(ref) + 1e-5 * o.dx_scale[n * m + j] + 1e-30)
            << "dx[" << n << "," << j << "]";
      }
    }
    const double dw_eps = epsilon_of(c.w_dtype.value_or(c.x_dtype));
    const double db_eps = epsilon_of(c.b_dtype.value_or(c.x_dtype));
    for (std::int64_t ch = 0; ch < sh.c; ++ch) {
      if (c.w_dtype) {
        EXPECT_NEAR(dw.get(0, ch), o.dw[ch], dw_eps * std::fabs(o.dw[ch]) + 1e-5 * o.dw_scale[ch])
            << "dw[" << ch << "]";
      }
      EXPECT_NEAR(db.get(0, ch), o.db[ch], db_eps * std::fabs(o.db[ch]) + 1e-5 * o.db_scale[ch])
          << "db[" << ch << "]";
    }
    HostTensor dy_copy = dy, dw2 = dw, db2 = db;
    run_bwd(dy_copy, dy_copy, dw2, db2);
    EXPECT_EQ(std::memcmp(dy_copy.bytes(), dx.bytes(), (sh.n * stride) * element_size(c.x_dtype)),
              0)
        << "dx in place differs from dx out of place";
    EXPECT_EQ(std::memcmp(dw2.bytes(), dw.bytes(), sh.c * element_size(dw.dtype())), 0);
    EXPECT_EQ(std::memcmp(db2.bytes(), db.bytes(), sh.c * element_size(db.dtype())), 0);
  }
};

TEST_P(GroupNormCpu, SpatialGroups) { check({3, 6, 3, 37, 0}); }
TEST_P(GroupNormCpu, OneGroup) { check({2, 8, 1, 17, 0}); }
TEST_P(GroupNormCpu, GroupPerChannel) { check({4, 12, 12, 50, 0}); }
TEST_P(GroupNormCpu, TwoDimensionalInput) { check({33, 64, 8, 1, 0}); }
TEST_P(GroupNormCpu, PaddedSamplesLongGroups) { check({2, 32, 4, 300, 5}); }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType x : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    out.push_back({x, std::nullopt, std::nullopt});
    out.push_back({x, x, x});
    if (x != DType::kFloat32) out.push_back({x, DType::kFloat32, DType::kFloat32});
    out.push_back({x, x, std::nullopt});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GroupNormCpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(GroupNormCpuEdge, ZeroSamplesGiveZeroGradients) {
  GroupNormParams p;
  p.groups = 2;
  HostTensor x(DType::kFloat32, {0, 8}), w(DType::kFloat32, {4}), dw(DType::kFloat32, {4});
  HostTensor mean(DType::kFloat32, {0}), rstd(DType::kFloat32, {0});
  for (std::int64_t c = 0; c < 4; ++c) dw.set(0, c, 7.0f);
  Shape sh{0, 4, 2, 2, 0};
  tigon::group_norm_fwd(p, as_ncs(x, sh), w.view(), {}, as_ncs(x, sh), mean.view(), rstd.view());
  std::vector<std::uint8_t> ws(tigon::group_norm_bwd_workspace_size(p, as_ncs(x, sh)) + 1);
  tigon::group_norm_bwd(p, as_ncs(x, sh), as_ncs(x, sh), w.view(), mean.view(), rstd.view(),
                        as_ncs(x, sh), dw.view(), {}, {ws.data(), ws.size()});
  for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(dw.get(0, c), 0.0f);
}

}  // namespace
