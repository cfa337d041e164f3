// SwiGLU / GeGLU CPU backend against a float64 oracle of the documented formula (include/tigon/
// ops/glu.h): every dtype and activation, odd widths, strided rows (gate_up halves), unaligned
// pointers, in-place gradients, empty inputs; and tigon's exp / tanh against libm in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "host_tensor.h"
#include "math/activations.h"
#include "math/glu.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::GluActivation;
using tigon::TensorView;
using tigon::testing::HostTensor;
using tigon::testing::round_to;
using tigon::testing::ulp_at;
using tigon::testing::ulp_distance;

// ------------------------------------------------------------------------- exp_f32, tanh_f32

// Every 97th float in [lo, hi] (both signs when symmetric): max ulp error and how many results
// are not the correctly rounded one.
template <typename F, typename G>
void sweep(float lo, float hi, F&& ours, G&& exact, int max_ulp, double max_misrounded) {
  std::int64_t n = 0, misrounded = 0, worst = 0;
  for (float x = lo; x <= hi;) {
    const float got = ours(x);
    const float want = static_cast<float>(exact(static_cast<double>(x)));
    const std::int64_t d = ulp_distance(DType::kFloat32, got, want);
    worst = std::max(worst, d);
    misrounded += d != 0;
    ++n;
    std::uint32_t bits = tigon::math::float_bits(x);
    // Step through the bit patterns: negative floats walk towards zero by decreasing bits.
    if (x < 0.0f) {
      bits = bits > 97u + 0x80000000u ? bits - 97u : 0u;
    } else {
      bits += 97u;
    }
    x = tigon::math::bits_float(bits);
  }
  EXPECT_LE(worst, max_ulp);
  EXPECT_LE(static_cast<double>(misrounded) / static_cast<double>(n), max_misrounded)
      << misrounded << " of " << n << " not correctly rounded";
}

TEST(GluMath, ExpAccuracy) {
  sweep(
      -87.0f, 88.7f, tigon::math::exp_f32, [](double x) { return std::exp(x); }, 1, 0.02);
}

TEST(GluMath, TanhAccuracy) {
  sweep(
      -9.5f, 9.5f, tigon::math::tanh_f32, [](double x) { return std::tanh(x); }, 2, 0.05);
}

TEST(GluMath, SpecialValues) {
  using tigon::math::exp_f32;
  using tigon::math::tanh_f32;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(89.0f), inf);
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_EQ(exp_f32(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exp_f32(nan)));
  EXPECT_TRUE(std::isfinite(exp_f32(88.72283f)));
  EXPECT_EQ(tanh_f32(0.0f), 0.0f);
  EXPECT_EQ(tanh_f32(inf), 1.0f);
  EXPECT_EQ(tanh_f32(-inf), -1.0f);
  EXPECT_EQ(tanh_f32(20.0f), 1.0f);
  EXPECT_TRUE(std::isnan(tanh_f32(nan)));
  EXPECT_EQ(tanh_f32(1e-30f), 1e-30f);
}

// ------------------------------------------------------------------------------- the oracle

constexpr double kF32Eps = 5.9604644775390625e-08;  // 2^-24

// act(a) and the sum of the absolute values of the float32 formula's terms: the scale of its
// rounding errors (1 + tanh cancels for large negative a, as it does in PyTorch's kernel).
std::pair<double, double> act64(GluActivation act, double a) {
  if (act == GluActivation::kSilu) {
    const double v = a / (1.0 + std::exp(-a));
    return {v, std::fabs(v)};
  }
  const double beta = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(beta * (a + 0.044715 * a * a * a));
  return {0.5 * a * (1.0 + t), std::fabs(0.5 * a) * (1.0 + std::fabs(t) * (1.0 + std::fabs(a)))};
}

// act'(a) and the scale of its terms.
std::pair<double, double> act_grad64(GluActivation act, double a) {
  if (act == GluActivation::kSilu) {
    const double s = 1.0 / (1.0 + std::exp(-a));
    return {s * (1.0 + a * (1.0 - s)), s + std::fabs(a * s)};
  }
  const double beta = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(beta * (a + 0.044715 * a * a * a));
  const double right = 0.5 * a * (1.0 - t * t) * beta * (1.0 + 3.0 * 0.044715 * a * a);
  const double right_scale = std::fabs(0.5 * a) * (1.0 + std::fabs(t) * (1.0 + std::fabs(a))) *
                             beta * (1.0 + 3.0 * 0.044715 * a * a) * 4.0;
  return {0.5 * (1.0 + t) + right, 0.5 * (1.0 + std::fabs(t)) + right_scale};
}

// One ulp of the result dtype for its rounding, plus `error` carried in from before it.
void expect_close(DType t, double got, double want, double error, const std::string& what) {
  const double tol = ulp_at(t, want) + error;
  EXPECT_LE(std::fabs(got - want), tol) << what << ": got " << got << ", want " << want;
}

struct Case {
  GluActivation act;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(tigon::glu_activation_name(info.param.act)) + "_" +
         tigon::dtype_name(info.param.dtype);
}

// A [rows, width] view `column` elements into each row of `t` (a wider buffer).
TensorView columns(HostTensor& t, std::int64_t column, std::int64_t width, int misalign = 0) {
  TensorView v = t.view(misalign);
  v.data = static_cast<std::uint8_t*>(v.data) + column * tigon::element_size(t.dtype());
  v.sizes[v.ndim - 1] = width;
  return v;
}

class GluCpu : public ::testing::TestWithParam<Case> {
 protected:
  tigon::GluMultipliers mult_;  // gate / down multipliers of the calls (default: the plain op)

  // Runs forward and backward on [rows, width] views with the given extra row padding and
  // misalignment and checks them against the oracle; in_place writes da into a and db into b.
  void check(std::int64_t rows, std::int64_t width, std::int64_t pad = 0, int misalign = 0,
             bool in_place = false, bool fused = false) {
    const Case c = GetParam();
    const DType t = c.dtype;
    std::mt19937 rng(static_cast<std::uint32_t>(rows * 7919 + width * 31 + pad));
    // fused: a and b are the two halves of one [rows, 2 * width] gate_up buffer.
    HostTensor gate_up(t, {rows, 2 * width + pad});
    HostTensor a_buf(t, {rows, width}, width + pad), b_buf(t, {rows, width}, width + pad);
    HostTensor dy(t, {rows, width}, width + pad), y(t, {rows, width}, width + pad);
    HostTensor da_buf(t, {rows, width}, width + pad), db_buf(t, {rows, width}, width + pad);
    std::normal_distribution<float> dist(0.0f, 2.0f);
    std::vector<double> a(rows * width), b(rows * width), g(rows * width);
    const TensorView av = fused ? columns(gate_up, 0, width, misalign) : a_buf.view(misalign);
    const TensorView bv = fused ? columns(gate_up, width, width, misalign) : b_buf.view(misalign);
    HostTensor* a_host = fused ? &gate_up : &a_buf;
    HostTensor* b_host = fused ? &gate_up : &b_buf;
    const std::int64_t b_col = fused ? width : 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < width; ++j) {
        a_host->set(r, j + misalign, dist(rng));
        b_host->set(r, b_col + j + misalign, dist(rng));
        dy.set(r, j + misalign, dist(rng));
        a[r * width + j] = a_host->get(r, j + misalign);
        b[r * width + j] = b_host->get(r, b_col + j + misalign);
        g[r * width + j] = dy.get(r, j + misalign);
      }
    }
    const TensorView dav = in_place ? av : da_buf.view(misalign);
    const TensorView dbv = in_place ? bv : db_buf.view(misalign);
    const bool scaled = mult_.gate != 1.0 || mult_.down != 1.0;
    if (scaled) {
      tigon::glu_fwd(c.act, av, bv, y.view(misalign), mult_);
      tigon::glu_bwd(c.act, dy.view(misalign), av, bv, dav, dbv, mult_);
    } else {
      tigon::glu_fwd(c.act, av, bv, y.view(misalign));
      tigon::glu_bwd(c.act, dy.view(misalign), av, bv, dav, dbv);
    }
    HostTensor* da_host = in_place ? a_host : &da_buf;
    HostTensor* db_host = in_place ? b_host : &db_buf;
    const std::int64_t db_col = in_place ? b_col : 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t j = 0; j < width; ++j) {
        const std::int64_t i = r * width + j;
        // The multipliers' steps (exact for 1): a product of a T value and a float32 value is
        // exact in double, then rounded to float32 and to T, as PyTorch's T * float scalar.
        const double gm = static_cast<float>(mult_.gate), dm = static_cast<float>(mult_.down);
        auto scaled_t = [&](double x, double m) {
          return round_to(t, static_cast<double>(static_cast<float>(x * m)));
        };
        const double z = scaled_t(a[i], gm);
        const auto [act, act_scale] = act64(c.act, z);
        const double h = round_to(t, act);
        // tigon's h: float32 arithmetic (16 rounding units of the terms), then rounded to T.
        const double h_error = ulp_at(t, act) + 16.0 * kF32Eps * act_scale;
        const std::string at =
            "row " + std::to_string(r) + " col " + std::to_string(j) + " a=" + std::to_string(a[i]);
        const double cy = round_to(t, h * b[i]);
        const double c_error = h_error * std::fabs(b[i]);
        if (scaled) {
          expect_close(t, y.get(r, j + misalign), scaled_t(cy, dm),
                       std::fabs(dm) * (ulp_at(t, cy) + c_error), "y " + at);
        } else {
          expect_close(t, y.get(r, j + misalign), cy, c_error, "y " + at);
        }
        const double dc = scaled_t(g[i], dm);
        const double gh = round_to(t, dc * b[i]);
        const auto [d, scale] = act_grad64(c.act, z);
        const double dz = round_to(t, gh * d);
        const double dz_error = 16.0 * kF32Eps * std::fabs(gh) * scale;
        if (scaled) {
          expect_close(t, da_host->get(r, j + misalign), scaled_t(dz, gm),
                       std::fabs(gm) * (ulp_at(t, dz) + dz_error), "da " + at);
        } else {
          expect_close(t, da_host->get(r, j + misalign), dz, dz_error, "da " + at);
        }
        expect_close(t, db_host->get(r, db_col + j + misalign), round_to(t, dc * h),
                     h_error * std::fabs(dc), "db " + at);
      }
    }
  }
};

TEST_P(GluCpu, Shapes) {
  for (std::int64_t w : {1, 2, 3, 7, 8, 9, 64, 127, 1000, 4099}) check(3, w);
  check(1, 10000);
  check(65, 33);
}
TEST_P(GluCpu, StridedRows) { check(5, 100, 28); }
TEST_P(GluCpu, Unaligned) { check(4, 37, 3, 1); }
TEST_P(GluCpu, InPlace) { check(6, 129, 0, 0, true); }
TEST_P(GluCpu, FusedGateUp) { check(7, 96, 0, 0, false, true); }
TEST_P(GluCpu, FusedGateUpInPlace) { check(7, 61, 5, 1, true, true); }

// Falcon-H1's mlp_multipliers and others: not representable in T, negative, tiny, large.
TEST_P(GluCpu, Multipliers) {
  for (const tigon::GluMultipliers m :
       {tigon::GluMultipliers{0.8927, 1.0}, tigon::GluMultipliers{1.0, 0.3921875},
        tigon::GluMultipliers{0.6, 1.7}, tigon::GluMultipliers{-2.5, -0.1},
        tigon::GluMultipliers{1e-3, 37.0}}) {
    mult_ = m;
    check(3, 257);
    check(5, 100, 28);
    check(4, 37, 3, 1, true);
    check(7, 61, 5, 1, true, true);
  }
}

// Multipliers of exactly 1 (as a double that rounds to float32 1 too) are the plain op, bitwise.
TEST_P(GluCpu, UnitMultipliersAreThePlainOp) {
  const Case c = GetParam();
  std::mt19937 rng(11);
  HostTensor a(c.dtype, {4, 67}), b(c.dtype, {4, 67}), dy(c.dtype, {4, 67});
  a.fill_normal(rng);
  b.fill_normal(rng);
  dy.fill_normal(rng);
  HostTensor y0(c.dtype, {4, 67}), da0(c.dtype, {4, 67}), db0(c.dtype, {4, 67});
  tigon::glu_fwd(c.act, a.view(), b.view(), y0.view());
  tigon::glu_bwd(c.act, dy.view(), a.view(), b.view(), da0.view(), db0.view());
  for (const double one : {1.0, 1.0 + 1e-12}) {
    HostTensor y1(c.dtype, {4, 67}), da1(c.dtype, {4, 67}), db1(c.dtype, {4, 67});
    tigon::glu_fwd(c.act, a.view(), b.view(), y1.view(), {one, one});
    tigon::glu_bwd(c.act, dy.view(), a.view(), b.view(), da1.view(), db1.view(), {one, one});
    for (std::int64_t i = 0; i < 4; ++i) {
      for (std::int64_t j = 0; j < 67; ++j) {
        EXPECT_EQ(y0.bits(i, j), y1.bits(i, j));
        EXPECT_EQ(da0.bits(i, j), da1.bits(i, j));
        EXPECT_EQ(db0.bits(i, j), db1.bits(i, j));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GluCpu,
                         ::testing::Values(Case{GluActivation::kSilu, DType::kFloat32},
                                           Case{GluActivation::kSilu, DType::kFloat16},
                                           Case{GluActivation::kSilu, DType::kBFloat16},
                                           Case{GluActivation::kGeluTanh, DType::kFloat32},
                                           Case{GluActivation::kGeluTanh, DType::kFloat16},
                                           Case{GluActivation::kGeluTanh, DType::kBFloat16}),
                         case_name);

// Special values go through the formula as in PyTorch: silu(+inf) = inf, silu(-inf) = NaN
// (-inf / inf), NaN propagates; large |a| saturates.
TEST(GluCpuValues, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  using Silu = tigon::math::Glu<GluActivation::kSilu, float>;
  using Gelu = tigon::math::Glu<GluActivation::kGeluTanh, float>;
  EXPECT_EQ(Silu::forward(inf, 1.0f), inf);
  EXPECT_TRUE(std::isnan(Silu::forward(-inf, 1.0f)));
  EXPECT_EQ(Silu::forward(-100.0f, 1.0f), -0.0f);
  EXPECT_EQ(Silu::forward(100.0f, 2.0f), 200.0f);
  EXPECT_EQ(Gelu::forward(10.0f, 1.0f), 10.0f);
  EXPECT_EQ(Gelu::forward(-10.0f, 1.0f), -0.0f);
  EXPECT_TRUE(std::isnan(Gelu::forward(std::nanf(""), 1.0f)));
  EXPECT_EQ(Silu::forward(0.0f, 5.0f), 0.0f);
}

TEST(GluCpuValues, EmptyTensorsAreNoOps) {
  HostTensor a(DType::kBFloat16, {0, 8}), y(DType::kBFloat16, {0, 8});
  tigon::swiglu_fwd(a.view(), a.view(), y.view());
  HostTensor e(DType::kFloat32, {4, 0});
  tigon::geglu_bwd(e.view(), e.view(), e.view(), e.view(), e.view());
}

// 3-D inputs collapse to rows; results equal the 2-D call bit for bit.
TEST(GluCpuValues, LeadingDimensionsCollapse) {
  std::mt19937 rng(3);
  HostTensor a(DType::kBFloat16, {2, 3, 50}), b(DType::kBFloat16, {2, 3, 50});
  HostTensor y3(DType::kBFloat16, {2, 3, 50}), y2(DType::kBFloat16, {6, 50});
  a.fill_normal(rng);
  b.fill_normal(rng);
  tigon::swiglu_fwd(a.view(), b.view(), y3.view());
  TensorView a2 = a.view(), b2 = b.view();
  a2.ndim = b2.ndim = 2;
  a2.sizes[0] = b2.sizes[0] = 6;
  a2.sizes[1] = b2.sizes[1] = 50;
  a2.strides[0] = b2.strides[0] = 50;
  a2.strides[1] = b2.strides[1] = 1;
  tigon::swiglu_fwd(a2, b2, y2.view());
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t j = 0; j < 50; ++j) EXPECT_EQ(y3.bits(0, i * 50 + j), y2.bits(i, j));
}

}  // namespace
