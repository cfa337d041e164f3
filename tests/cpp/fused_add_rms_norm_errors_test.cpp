// Validation errors of fused_add_rms_norm_fwd/bwd: those of residual, h, dh and the in-place
// aliases, plus a sample of the RMSNorm checks it shares (rms_norm_errors_test.cpp has them all).
#include <gtest/gtest.h>

#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::RmsNormParams;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;

constexpr const char* kFwd = "fused_add_rms_norm_fwd";
constexpr const char* kBwd = "fused_add_rms_norm_bwd";

class FusedAddRmsNormErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3, kHidden = 16;
  HostTensor x{DType::kBFloat16, {kRows, kHidden}};
  HostTensor residual{DType::kBFloat16, {kRows, kHidden}};
  HostTensor w{DType::kFloat32, {kHidden}};
  HostTensor h{DType::kBFloat16, {kRows, kHidden}};
  HostTensor y{DType::kFloat32, {kRows, kHidden}};  // promote(bf16, f32) in Llama mode
  HostTensor rstd{DType::kFloat32, {kRows}};
  HostTensor dy{DType::kFloat32, {kRows, kHidden}};
  HostTensor dh{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dx{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dw{DType::kFloat32, {kHidden}};
  std::vector<std::uint8_t> workspace = std::vector<std::uint8_t>(1 << 16);
  RmsNormParams p;

  void fwd(const TensorView& rv, const TensorView& hv, const TensorView& yv) {
    tigon::fused_add_rms_norm_fwd(p, x.view(), rv, w.view(), hv, yv, rstd.view());
  }
  void bwd(const TensorView& dyv, const TensorView& dhv, const TensorView& dxv) {
    tigon::fused_add_rms_norm_bwd(p, dyv, dhv, h.view(), w.view(), rstd.view(), dxv, dw.view(),
                                  {workspace.data(), workspace.size()});
  }
};

TEST_F(FusedAddRmsNormErrors, ValidCallsSucceed) {
  fwd(residual.view(), h.view(), y.view());
  bwd(dy.view(), dh.view(), dx.view());
  bwd(dy.view(), dh.view(), dh.view());  // in place into dh
}

TEST_F(FusedAddRmsNormErrors, Residual) {
  HostTensor r16(DType::kFloat16, {kRows, kHidden}), r_short(DType::kBFloat16, {kRows, 8});
  expect_error([&] { fwd(r16.view(), h.view(), y.view()); }, ErrorCode::kTypeError, "residual",
               "dtype bfloat16 (x's dtype)", kFwd);
  expect_error([&] { fwd(r_short.view(), h.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "residual", "x's shape", kFwd);
  // A last dimension without unit stride (every other tensor viewed as [3, 8]).
  const auto first8 = [](TensorView t) {
    t.sizes[1] = 8;
    return t;
  };
  TensorView strided = first8(residual.view());
  strided.strides[1] = 2;
  expect_error(
      [&] {
        tigon::fused_add_rms_norm_fwd(p, first8(x.view()), strided, TensorView{}, first8(h.view()),
                                      first8(h.view()), rstd.view());
      },
      ErrorCode::kInvalidArgument, "residual", "expected", kFwd);
}

TEST_F(FusedAddRmsNormErrors, H) {
  HostTensor h32(DType::kFloat32, {kRows, kHidden});
  expect_error([&] { fwd(residual.view(), h32.view(), y.view()); }, ErrorCode::kTypeError, "h",
               "dtype bfloat16 (x's dtype)", kFwd);
  expect_error([&] { fwd(residual.view(), h.view(), h.view()); }, ErrorCode::kTypeError, "y",
               "dtype float32", kFwd);
}

TEST_F(FusedAddRmsNormErrors, BackwardNamesH) {
  HostTensor h_int_shape(DType::kBFloat16, {kRows, 8});
  expect_error(
      [&] {
        tigon::fused_add_rms_norm_bwd(p, dy.view(), dh.view(), h_int_shape.view(), w.view(),
                                      rstd.view(), dx.view(), dw.view(),
                                      {workspace.data(), workspace.size()});
      },
      ErrorCode::kInvalidArgument, "weight", "expected", kBwd);
  HostTensor dx_short(DType::kBFloat16, {kRows, 8});
  expect_error([&] { bwd(dy.view(), dh.view(), dx_short.view()); }, ErrorCode::kInvalidArgument,
               "dx", "(h's shape)", kBwd);
}

TEST_F(FusedAddRmsNormErrors, Dh) {
  HostTensor dh32(DType::kFloat32, {kRows, kHidden});
  expect_error([&] { bwd(dy.view(), dh32.view(), dx.view()); }, ErrorCode::kTypeError, "dh",
               "dtype bfloat16 (h's dtype)", kBwd);
}

TEST_F(FusedAddRmsNormErrors, InPlaceAliases) {
  // dx over a float32 dy (y's dtype here) would overwrite elements not read yet.
  TensorView dx_over_dy = dy.view();
  dx_over_dy.dtype = DType::kBFloat16;
  expect_error([&] { bwd(dy.view(), dh.view(), dx_over_dy); }, ErrorCode::kTypeError, "dx",
               "the same dtype as dy", kBwd);
  // dx over dh with another row stride.
  HostTensor wide(DType::kBFloat16, {kRows, kHidden}, 2 * kHidden);
  TensorView dh_wide = wide.view();
  TensorView dx_same_data = dh.view();
  dx_same_data.data = dh_wide.data;
  expect_error([&] { bwd(dy.view(), dh_wide, dx_same_data); }, ErrorCode::kInvalidArgument, "dx",
               "the same row stride as dh", kBwd);
}

TEST_F(FusedAddRmsNormErrors, CudaTensorsWithoutTheBackend) {
  if (tigon::has_cuda_backend()) GTEST_SKIP() << "this build has the CUDA backend";
  TensorView xc = x.view();
  xc.device = {tigon::DeviceType::kCUDA, 0};
  expect_error(
      [&] {
        tigon::fused_add_rms_norm_fwd(p, xc, residual.view(), w.view(), h.view(), y.view(),
                                      rstd.view());
      },
      ErrorCode::kBackendUnavailable, "x", "CPU tensor", kFwd);
}

}  // namespace
