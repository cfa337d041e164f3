// Every validation error of poly_norm_fwd/bwd: the right ErrorCode and a message that names the
// argument and says what was expected.
#include <gtest/gtest.h>

#include <limits>
#include <string>
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

class PolyNormErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3, kHidden = 16;
  static constexpr float kEps = 1e-6f;
  HostTensor x{DType::kBFloat16, {kRows, kHidden}};
  HostTensor w{DType::kBFloat16, {3}};
  HostTensor b{DType::kFloat32, {1}};
  HostTensor y{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dy{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dx{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dw{DType::kBFloat16, {3}};
  HostTensor db{DType::kFloat32, {1}};
  std::vector<std::uint8_t> workspace = std::vector<std::uint8_t>(1 << 16);

  void fwd(const TensorView& xv, const TensorView& wv, const TensorView& bv, const TensorView& yv,
           float eps = kEps) {
    tigon::poly_norm_fwd(xv, wv, bv, yv, eps);
  }
  void bwd(const TensorView& dyv, const TensorView& dxv, const TensorView& dwv,
           const TensorView& dbv, tigon::Workspace ws) {
    tigon::poly_norm_bwd(dyv, x.view(), w.view(), b.view(), dxv, dwv, dbv, kEps, ws);
  }
  tigon::Workspace ws() { return {workspace.data(), workspace.size()}; }
};

TEST_F(PolyNormErrors, ValidCallsSucceed) {
  fwd(x.view(), w.view(), b.view(), y.view());
  bwd(dy.view(), dx.view(), dw.view(), db.view(), ws());
  bwd(dy.view(), dy.view(), dw.view(), db.view(), ws());  // in place
}

TEST_F(PolyNormErrors, Eps) {
  expect_error([&] { fwd(x.view(), w.view(), b.view(), y.view(), -1.0f); },
               ErrorCode::kInvalidArgument, "eps", "a finite value >= 0", "poly_norm_fwd");
  expect_error(
      [&] { fwd(x.view(), w.view(), b.view(), y.view(), std::numeric_limits<float>::quiet_NaN()); },
      ErrorCode::kInvalidArgument, "eps", "a finite value >= 0", "poly_norm_fwd");
}

TEST_F(PolyNormErrors, XShapeAndLayout) {
  HostTensor scalar(DType::kBFloat16, {});
  expect_error([&] { fwd(scalar.view(), w.view(), b.view(), y.view()); },
               ErrorCode::kInvalidArgument, "x", "expected", "poly_norm_fwd");
  TensorView strided = x.view();
  strided.strides[1] = 2;
  expect_error([&] { fwd(strided, w.view(), b.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "x", "expected", "poly_norm_fwd");
}

TEST_F(PolyNormErrors, Dtypes) {
  HostTensor w16(DType::kFloat16, {3}), b16(DType::kFloat16, {1}),
      y32(DType::kFloat32, {kRows, kHidden});
  expect_error([&] { fwd(x.view(), w16.view(), b.view(), y.view()); }, ErrorCode::kTypeError,
               "weight", "(x's) or float32", "poly_norm_fwd");
  expect_error([&] { fwd(x.view(), w.view(), b16.view(), y.view()); }, ErrorCode::kTypeError,
               "bias", "(x's) or float32", "poly_norm_fwd");
  expect_error([&] { fwd(x.view(), w.view(), b.view(), y32.view()); }, ErrorCode::kTypeError, "y",
               "dtype bfloat16 (x's dtype)", "poly_norm_fwd");
  HostTensor dw32(DType::kFloat32, {3}), db16(DType::kBFloat16, {1}),
      dy32(DType::kFloat32, {kRows, kHidden});
  expect_error([&] { bwd(dy.view(), dx.view(), dw32.view(), db.view(), ws()); },
               ErrorCode::kTypeError, "dweight", "dtype bfloat16", "poly_norm_bwd");
  expect_error([&] { bwd(dy.view(), dx.view(), dw.view(), db16.view(), ws()); },
               ErrorCode::kTypeError, "dbias", "dtype float32", "poly_norm_bwd");
  expect_error([&] { bwd(dy32.view(), dx.view(), dw.view(), db.view(), ws()); },
               ErrorCode::kTypeError, "dy", "dtype bfloat16", "poly_norm_bwd");
}

TEST_F(PolyNormErrors, Shapes) {
  HostTensor w4(DType::kBFloat16, {4}), b2(DType::kFloat32, {2}),
      y_short(DType::kBFloat16, {kRows, kHidden - 1});
  expect_error([&] { fwd(x.view(), w4.view(), b.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "weight", "shape [3] (one weight per power)", "poly_norm_fwd");
  expect_error([&] { fwd(x.view(), w.view(), b2.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "bias", "one element", "poly_norm_fwd");
  expect_error([&] { fwd(x.view(), w.view(), b.view(), y_short.view()); },
               ErrorCode::kInvalidArgument, "y", "expected", "poly_norm_fwd");
  HostTensor dw2(DType::kBFloat16, {2}), db0(DType::kFloat32, {0});
  expect_error([&] { bwd(dy.view(), dx.view(), dw2.view(), db.view(), ws()); },
               ErrorCode::kInvalidArgument, "dweight", "shape [3]", "poly_norm_bwd");
  expect_error([&] { bwd(dy.view(), dx.view(), dw.view(), db0.view(), ws()); },
               ErrorCode::kInvalidArgument, "dbias", "one element", "poly_norm_bwd");
  expect_error([&] { bwd(y_short.view(), dx.view(), dw.view(), db.view(), ws()); },
               ErrorCode::kInvalidArgument, "dy", "expected", "poly_norm_bwd");
}

TEST_F(PolyNormErrors, InPlaceNeedsTheSameRowStride) {
  HostTensor wide(DType::kBFloat16, {kRows, kHidden}, kHidden + 4);
  TensorView alias = wide.view();
  alias.data = dy.view().data;
  expect_error([&] { bwd(dy.view(), alias, dw.view(), db.view(), ws()); },
               ErrorCode::kInvalidArgument, "dx", "same row stride");
}

TEST_F(PolyNormErrors, WorkspaceTooSmall) {
  const std::size_t need = tigon::poly_norm_bwd_workspace_size(x.view());
  ASSERT_GT(need, 0u);
  expect_error(
      [&] {
        bwd(dy.view(), dx.view(), dw.view(), db.view(), {workspace.data(), need - 1});
      },
      ErrorCode::kInvalidArgument, "workspace", "poly_norm_bwd_workspace_size", "poly_norm_bwd");
}

TEST_F(PolyNormErrors, DevicesMustMatchAndExist) {
  TensorView bc = b.view();
  bc.device = tigon::Device::cuda(0);
  expect_error([&] { fwd(x.view(), w.view(), bc, y.view()); }, ErrorCode::kInvalidArgument, "bias",
               "cpu", "poly_norm_fwd");
  TensorView xc = x.view(), yc = y.view(), wc = w.view(), bcc = b.view();
  xc.device = yc.device = wc.device = bcc.device = tigon::Device::cuda(0);
  // A CUDA backend runs these (tests/cuda); without one the validation layer says so.
  if (tigon::has_cuda_backend()) GTEST_SKIP() << "this build has a CUDA backend";
  try {
    fwd(xc, wc, bcc, yc);
    ADD_FAILURE() << "no error for a CUDA x";
  } catch (const tigon::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBackendUnavailable) << e.what();
  }
}

}  // namespace
