// Fused residual add + RMSNorm on the CPU: bitwise equal to the unfused composition (h rounded
// as the spec says, then tigon::rms_norm_fwd / _bwd and the add of h's two gradients), for every
// casting mode, dtype pair, affine or not, and each in-place mode of the backward; h and dx also
// against a float64 oracle (RMSNorm itself is checked against one in rms_norm_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::CastingMode;
using tigon::DType;
using tigon::RmsNormParams;
using tigon::TensorView;
using tigon::testing::epsilon_of;
using tigon::testing::HostTensor;
using tigon::testing::round_to;

enum class InPlace { kNo, kIntoDh, kIntoDy };

struct Case {
  CastingMode mode;
  DType x_dtype;
  DType w_dtype;
  bool affine;
  InPlace in_place;
};

std::string case_name(const Case& c) {
  std::string s =
      std::string(tigon::casting_mode_name(c.mode)) + "_x" + tigon::dtype_name(c.x_dtype);
  s += c.affine ? std::string("_w") + tigon::dtype_name(c.w_dtype) : "_noaffine";
  if (c.in_place == InPlace::kIntoDh) s += "_into_dh";
  if (c.in_place == InPlace::kIntoDy) s += "_into_dy";
  return s;
}

void expect_same_bits(const HostTensor& got, const HostTensor& want, const char* what) {
  for (std::int64_t i = 0; i < want.rows(); ++i) {
    for (std::int64_t j = 0; j < want.hidden(); ++j) {
      ASSERT_EQ(got.bits(i, j), want.bits(i, j)) << what << "[" << i << "," << j << "]";
    }
  }
}

class FusedAddRmsNormCpu : public ::testing::TestWithParam<Case> {
 protected:
  void check(std::int64_t rows, std::int64_t hidden, std::int64_t pad = 0, float offset = 0.0f) {
    const Case c = GetParam();
    RmsNormParams p;
    p.eps = 1e-6f;
    p.offset = c.affine ? offset : 0.0f;
    p.casting_mode = c.mode;
    std::mt19937 rng(static_cast<unsigned>(rows * 31 + hidden));
    const std::int64_t stride = hidden + pad;
    const DType t = c.x_dtype;
    const DType y_dtype = tigon::rms_norm_output_dtype(p, t, c.w_dtype, c.affine);
    HostTensor x(t, {rows, hidden}, stride), residual(t, {rows, hidden}, stride + 3);
    x.fill_normal(rng, 0.0f, 1.0f);
    residual.fill_normal(rng, 0.1f, 2.0f);
    HostTensor w(c.w_dtype, {hidden});
    w.fill_normal(rng, c.mode == CastingMode::kGemma ? 0.0f : 1.0f, 0.3f);
    const TensorView wv = c.affine ? w.view() : TensorView{};

    HostTensor h(t, {rows, hidden}, stride), y(y_dtype, {rows, hidden}, stride);
    HostTensor rstd(DType::kFloat32, {rows});
    tigon::fused_add_rms_norm_fwd(p, x.view(), residual.view(), wv, h.view(), y.view(),
                                  rstd.view());

    // h against float64: one rounding of the exact sum (the float32 sum of two values of T is
    // exact for these magnitudes).
    HostTensor h_ref(t, {rows, hidden}, stride);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double sum = static_cast<double>(x.get(i, j)) + residual.get(i, j);
        h_ref.set(i, j, static_cast<float>(round_to(t, sum)));
      }
    }
    expect_same_bits(h, h_ref, "h");

    // The unfused composition: tigon::rms_norm_fwd of h.
    HostTensor y_ref(y_dtype, {rows, hidden}, stride), rstd_ref(DType::kFloat32, {rows});
    tigon::rms_norm_fwd(p, h_ref.view(), wv, y_ref.view(), rstd_ref.view());
    expect_same_bits(y, y_ref, "y");
    expect_same_bits(rstd, rstd_ref, "rstd");

    // Backward: dx = round_T(dh + rms_norm_bwd's dx), bitwise; dw bitwise.
    HostTensor dy(y_dtype, {rows, hidden}, stride), dh(t, {rows, hidden}, stride);
    dy.fill_normal(rng);
    dh.fill_normal(rng, 0.0f, 0.5f);
    HostTensor norm_dx(t, {rows, hidden}, stride), dw_ref(c.w_dtype, {hidden});
    std::vector<std::uint8_t> ws_ref(tigon::rms_norm_bwd_workspace_size(p, h.view(), wv));
    tigon::rms_norm_bwd(p, dy.view(), h.view(), wv, rstd.view(), norm_dx.view(),
                        c.affine ? dw_ref.view() : TensorView{}, {ws_ref.data(), ws_ref.size()});
    HostTensor dx_ref(t, {rows, hidden}, stride);
    std::vector<double> oracle_dx(rows * hidden);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double sum = static_cast<double>(dh.get(i, j)) + norm_dx.get(i, j);
        dx_ref.set(i, j, static_cast<float>(sum));  // float32 add, then set rounds to T
        oracle_dx[i * hidden + j] = sum;
      }
    }

    HostTensor dx(t, {rows, hidden}, stride), dw(c.w_dtype, {hidden});
    std::vector<std::uint8_t> ws(tigon::fused_add_rms_norm_bwd_workspace_size(p, h.view(), wv));
    const TensorView dx_view = c.in_place == InPlace::kIntoDh   ? dh.view()
                               : c.in_place == InPlace::kIntoDy ? dy.view()
                                                                : dx.view();
    tigon::fused_add_rms_norm_bwd(p, dy.view(), dh.view(), h.view(), wv, rstd.view(), dx_view,
                                  c.affine ? dw.view() : TensorView{}, {ws.data(), ws.size()});
    const HostTensor& dx_out = c.in_place == InPlace::kIntoDh   ? dh
                               : c.in_place == InPlace::kIntoDy ? dy
                                                                : dx;
    expect_same_bits(dx_out, dx_ref, "dx");
    if (c.affine) expect_same_bits(dw, dw_ref, "dw");
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < hidden; ++j) {
        const double ref = oracle_dx[i * hidden + j];
        ASSERT_NEAR(dx_out.get(i, j), ref, epsilon_of(t) * std::fabs(ref)) << i << "," << j;
      }
    }
  }
};

TEST_P(FusedAddRmsNormCpu, OddHiddenSizes) {
  for (std::int64_t hidden : {1, 3, 127, 1025}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden));
    check(5, hidden);
  }
}

TEST_P(FusedAddRmsNormCpu, ManyRowsOffsetAndStrides) {
  check(70, 96, 5, GetParam().affine ? 1.0f : 0.0f);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (CastingMode mode : {CastingMode::kLlama, CastingMode::kGemma, CastingMode::kNone}) {
    for (DType x : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const std::vector<DType> weights =
          x == DType::kFloat32 ? std::vector<DType>{x} : std::vector<DType>{x, DType::kFloat32};
      for (DType w : weights) {
        for (bool affine : {true, false}) {
          if (!affine && w != x) continue;
          Case c{mode, x, w, affine, InPlace::kNo};
          cases.push_back(c);
          if (w != x) continue;
          c.in_place = InPlace::kIntoDh;
          cases.push_back(c);
          if (tigon::rms_norm_output_dtype({}, x, w, affine) == x) {
            c.in_place = InPlace::kIntoDy;
            cases.push_back(c);
          }
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllModes, FusedAddRmsNormCpu, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(FusedAddRmsNormCpuEmpty, ZeroRowsGiveZeroDw) {
  RmsNormParams p;
  HostTensor x(DType::kFloat32, {0, 8}), w(DType::kFloat32, {8}), rstd(DType::kFloat32, {0});
  HostTensor dw(DType::kFloat32, {8});
  for (std::int64_t j = 0; j < 8; ++j) dw.set(0, j, 5.0f);
  tigon::fused_add_rms_norm_fwd(p, x.view(), x.view(), w.view(), x.view(), x.view(), rstd.view());
  std::vector<std::uint8_t> ws(tigon::fused_add_rms_norm_bwd_workspace_size(p, x.view(), w.view()));
  tigon::fused_add_rms_norm_bwd(p, x.view(), x.view(), x.view(), w.view(), rstd.view(), x.view(),
                                dw.view(), {ws.data(), ws.size()});
  for (std::int64_t j = 0; j < 8; ++j) EXPECT_EQ(dw.get(0, j), 0.0f);
}

}  // namespace
