// Every validation error of rms_norm_fwd/bwd: the right ErrorCode and a message that names the
// argument and says what was expected.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
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

class RmsNormErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3, kHidden = 16;
  HostTensor x{DType::kBFloat16, {kRows, kHidden}};
  HostTensor w{DType::kBFloat16, {kHidden}};
  HostTensor y{DType::kBFloat16, {kRows, kHidden}};
  HostTensor rstd{DType::kFloat32, {kRows}};
  HostTensor dy{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dx{DType::kBFloat16, {kRows, kHidden}};
  HostTensor dw{DType::kBFloat16, {kHidden}};
  std::vector<std::uint8_t> workspace = std::vector<std::uint8_t>(1 << 16);
  RmsNormParams p;

  void fwd(const TensorView& xv, const TensorView& wv, const TensorView& yv, const TensorView& rv,
           RmsNormParams params) {
    tigon::rms_norm_fwd(params, xv, wv, yv, rv);
  }
  void bwd(const TensorView& dyv, const TensorView& dxv, const TensorView& dwv,
           tigon::Workspace ws) {
    tigon::rms_norm_bwd(p, dyv, x.view(), w.view(), rstd.view(), dxv, dwv, ws);
  }
  tigon::Workspace ws() { return {workspace.data(), workspace.size()}; }
};

TEST_F(RmsNormErrors, ValidCallsSucceed) {
  fwd(x.view(), w.view(), y.view(), rstd.view(), p);
  bwd(dy.view(), dx.view(), dw.view(), ws());
  bwd(dy.view(), dy.view(), dw.view(), ws());  // in place
}

TEST_F(RmsNormErrors, Params) {
  RmsNormParams bad = p;
  bad.eps = -1e-6f;
  expect_error([&] { fwd(x.view(), w.view(), y.view(), rstd.view(), bad); },
               ErrorCode::kInvalidArgument, "eps");
  bad.eps = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { fwd(x.view(), w.view(), y.view(), rstd.view(), bad); },
               ErrorCode::kInvalidArgument, "eps");
  bad = p;
  bad.offset = 1.0f;
  expect_error([&] { fwd(x.view(), TensorView{}, y.view(), rstd.view(), bad); },
               ErrorCode::kInvalidArgument, "offset");
  bad = p;
  bad.casting_mode = static_cast<tigon::CastingMode>(7);
  expect_error([&] { fwd(x.view(), w.view(), y.view(), rstd.view(), bad); },
               ErrorCode::kInvalidArgument, "casting_mode");
}

TEST_F(RmsNormErrors, XShapeAndLayout) {
  HostTensor empty_hidden(DType::kBFloat16, {kRows, 0});
  HostTensor y0(DType::kBFloat16, {kRows, 0});
  expect_error([&] { fwd(empty_hidden.view(), TensorView{}, y0.view(), rstd.view(), p); },
               ErrorCode::kInvalidArgument, "x", "hidden size");
  TensorView transposed = x.view();
  transposed.strides[1] = kRows;
  transposed.strides[0] = 1;
  expect_error([&] { fwd(transposed, w.view(), y.view(), rstd.view(), p); },
               ErrorCode::kInvalidArgument, "x", "unit stride");
  HostTensor x3(DType::kBFloat16, {2, 3, kHidden});
  TensorView gapped = x3.view();
  gapped.sizes[0] = 1;  // fine
  gapped = x3.view();
  gapped.strides[0] = 5 * kHidden;  // batches not spaced by 3 rows: cannot collapse
  HostTensor y3(DType::kBFloat16, {2, 3, kHidden});
  HostTensor r6(DType::kFloat32, {6});
  expect_error([&] { fwd(gapped, w.view(), y3.view(), r6.view(), p); }, ErrorCode::kInvalidArgument,
               "x", "collapse");
}

TEST_F(RmsNormErrors, Dtypes) {
  TensorView xi = x.view();
  xi.dtype = static_cast<DType>(9);  // e.g. an integer dtype from a binding
  expect_error([&] { fwd(xi, w.view(), y.view(), rstd.view(), p); }, ErrorCode::kTypeError, "x",
               "float32");
  HostTensor y32(DType::kFloat32, {kRows, kHidden});
  expect_error([&] { fwd(x.view(), w.view(), y32.view(), rstd.view(), p); }, ErrorCode::kTypeError,
               "y", "bfloat16");
  HostTensor r16(DType::kFloat16, {kRows});
  expect_error([&] { fwd(x.view(), w.view(), y.view(), r16.view(), p); }, ErrorCode::kTypeError,
               "rstd");
  expect_error([&] { bwd(y32.view(), dx.view(), dw.view(), ws()); }, ErrorCode::kTypeError, "dy");
  HostTensor dx32(DType::kFloat32, {kRows, kHidden});
  expect_error([&] { bwd(dy.view(), dx32.view(), dw.view(), ws()); }, ErrorCode::kTypeError, "dx");
  HostTensor dw32(DType::kFloat32, {kHidden});
  expect_error([&] { bwd(dy.view(), dx.view(), dw32.view(), ws()); }, ErrorCode::kTypeError, "dw");
}

TEST_F(RmsNormErrors, Shapes) {
  HostTensor w_short(DType::kBFloat16, {kHidden - 1});
  expect_error([&] { fwd(x.view(), w_short.view(), y.view(), rstd.view(), p); },
               ErrorCode::kInvalidArgument, "weight", "[16]");
  HostTensor y_bad(DType::kBFloat16, {kRows, kHidden + 1});
  expect_error([&] { fwd(x.view(), w.view(), y_bad.view(), rstd.view(), p); },
               ErrorCode::kInvalidArgument, "y", "shape");
  HostTensor r_bad(DType::kFloat32, {kRows + 1});
  expect_error([&] { fwd(x.view(), w.view(), y.view(), r_bad.view(), p); },
               ErrorCode::kInvalidArgument, "rstd");
  HostTensor dw_bad(DType::kBFloat16, {kHidden + 2});
  expect_error([&] { bwd(dy.view(), dx.view(), dw_bad.view(), ws()); }, ErrorCode::kInvalidArgument,
               "dw");
  HostTensor dy_bad(DType::kBFloat16, {kRows + 1, kHidden});
  expect_error([&] { bwd(dy_bad.view(), dx.view(), dw.view(), ws()); }, ErrorCode::kInvalidArgument,
               "dy");
  TensorView w_strided = w.view();
  w_strided.strides[0] = 2;
  w_strided.sizes[0] = kHidden;
  expect_error([&] { fwd(x.view(), w_strided, y.view(), rstd.view(), p); },
               ErrorCode::kInvalidArgument, "weight", "contiguous");
}

TEST_F(RmsNormErrors, WorkspaceTooSmall) {
  const std::size_t need = tigon::rms_norm_bwd_workspace_size(p, x.view(), w.view());
  ASSERT_GT(need, 0u);
  expect_error(
      [&] {
        bwd(dy.view(), dx.view(), dw.view(), {workspace.data(), need - 1});
      },
      ErrorCode::kInvalidArgument, "workspace", std::to_string(need));
}

TEST_F(RmsNormErrors, DevicesMustMatchAndExist) {
  TensorView wc = w.view();
  wc.device = tigon::Device::cuda(0);
  expect_error([&] { fwd(x.view(), wc, y.view(), rstd.view(), p); }, ErrorCode::kInvalidArgument,
               "weight", "cpu");
  if (tigon::has_cuda_backend()) GTEST_SKIP() << "this build has a CUDA backend";
  TensorView xc = x.view(), yc = y.view(), rc = rstd.view();
  xc.device = yc.device = rc.device = tigon::Device::cuda(0);
  expect_error([&] { fwd(xc, TensorView{}, yc, rc, p); }, ErrorCode::kBackendUnavailable, "x",
               "no CUDA backend");
}

}  // namespace
