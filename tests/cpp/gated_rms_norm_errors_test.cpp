// Validation errors of gated_rms_norm_fwd/bwd: each names the argument and says what was expected
// and what it got.
#include <gtest/gtest.h>

#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::GatedRmsNormParams;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;

constexpr const char* kFwd = "gated_rms_norm_fwd";
constexpr const char* kBwd = "gated_rms_norm_bwd";

class GatedRmsNormErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3, kHidden = 16;
  HostTensor x{DType::kBFloat16, {kRows, kHidden}};
  HostTensor gate{DType::kBFloat16, {kRows, kHidden}};
  HostTensor w{DType::kFloat32, {kHidden}};
  HostTensor y{DType::kBFloat16, {kRows, kHidden}};
  HostTensor rstd{DType::kFloat32, {kRows}};
  HostTensor dy{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dx{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dgate{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dw{DType::kFloat32, {kHidden}};
  std::vector<std::uint8_t> workspace = std::vector<std::uint8_t>(1 << 16);
  GatedRmsNormParams p;

  void fwd(const TensorView& gv, const TensorView& wv, const TensorView& yv) {
    tigon::gated_rms_norm_fwd(p, x.view(), gv, wv, yv, rstd.view());
  }
  void bwd(const TensorView& dxv, const TensorView& dgv, const TensorView& dwv,
           tigon::Workspace ws) {
    tigon::gated_rms_norm_bwd(p, dy.view(), x.view(), gate.view(), w.view(), rstd.view(), dxv, dgv,
                              dwv, ws);
  }
  tigon::Workspace ws() { return {workspace.data(), workspace.size()}; }
};

TEST_F(GatedRmsNormErrors, ValidCallsSucceed) {
  EXPECT_EQ(tigon::gated_rms_norm_fwd_workspace_size(p, x.view(), w.view()), 0u);  // on the CPU
  fwd(gate.view(), w.view(), y.view());
  bwd(dx.view(), dgate.view(), dw.view(), ws());
  bwd(dy.view(), dgate.view(), dw.view(), ws());  // dx in place into dy
  bwd(dx.view(), dy.view(), dw.view(), ws());     // dgate in place into dy
}

TEST_F(GatedRmsNormErrors, Forward) {
  HostTensor g16(DType::kFloat16, {kRows, kHidden}), g_short(DType::kBFloat16, {kRows, 8});
  HostTensor w8(DType::kFloat32, {8}), y32(DType::kFloat32, {kRows, kHidden});
  HostTensor rstd2(DType::kFloat32, {2});
  expect_error([&] { fwd(g16.view(), w.view(), y.view()); }, ErrorCode::kTypeError, "gate",
               "dtype bfloat16 (x's dtype)", kFwd);
  expect_error([&] { fwd(g_short.view(), w.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "gate", "x's shape", kFwd);
  expect_error([&] { fwd(gate.view(), TensorView{}, y.view()); }, ErrorCode::kInvalidArgument,
               "weight", "shape [H]", kFwd);
  expect_error([&] { fwd(gate.view(), w8.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "weight", "shape [16]", kFwd);
  expect_error([&] { fwd(gate.view(), w.view(), y32.view()); }, ErrorCode::kTypeError, "y",
               "dtype bfloat16 (x's dtype)", kFwd);
  expect_error(
      [&] {
        tigon::gated_rms_norm_fwd(p, x.view(), gate.view(), w.view(), y.view(), rstd2.view());
      },
      ErrorCode::kInvalidArgument, "rstd", "3 elements", kFwd);
  p.eps = -1.0f;
  expect_error([&] { fwd(gate.view(), w.view(), y.view()); }, ErrorCode::kInvalidArgument, "eps",
               ">= 0", kFwd);
}

TEST_F(GatedRmsNormErrors, Backward) {
  HostTensor dg32(DType::kFloat32, {kRows, kHidden}), dw16(DType::kBFloat16, {kHidden});
  HostTensor dw8(DType::kFloat32, {8});
  expect_error([&] { bwd(dx.view(), dg32.view(), dw.view(), ws()); }, ErrorCode::kTypeError,
               "dgate", "dtype bfloat16 (x's dtype)", kBwd);
  expect_error([&] { bwd(dx.view(), dgate.view(), dw16.view(), ws()); }, ErrorCode::kTypeError,
               "dw", "dtype float32", kBwd);
  expect_error([&] { bwd(dx.view(), dgate.view(), dw8.view(), ws()); }, ErrorCode::kInvalidArgument,
               "dw", "shape [16]", kBwd);
  expect_error([&] { bwd(dx.view(), dx.view(), dw.view(), ws()); }, ErrorCode::kInvalidArgument,
               "dgate", "other than dx's", kBwd);
  expect_error(
      [&] {
        bwd(dx.view(), dgate.view(), dw.view(), {workspace.data(), 8});
      },
      ErrorCode::kInvalidArgument, "workspace", "gated_rms_norm_bwd_workspace_size", kBwd);
}

TEST_F(GatedRmsNormErrors, DevicesMustMatchAndExist) {
  TensorView wc = w.view();
  wc.device = tigon::Device::cuda(0);
  expect_error([&] { fwd(gate.view(), wc, y.view()); }, ErrorCode::kInvalidArgument, "weight",
               "cpu", kFwd);
  TensorView xc = x.view(), gc = gate.view(), wc2 = w.view(), yc = y.view(), rc = rstd.view();
  xc.device = gc.device = wc2.device = yc.device = rc.device = tigon::Device::cuda(0);
  // A CUDA backend runs these (tests/cuda); without one the validation layer says so.
  if (tigon::has_cuda_backend()) GTEST_SKIP() << "this build has a CUDA backend";
  try {
    tigon::gated_rms_norm_fwd(p, xc, gc, wc2, yc, rc);
    ADD_FAILURE() << "no error for a CUDA x";
  } catch (const tigon::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBackendUnavailable) << e.what();
  }
}

}  // namespace
