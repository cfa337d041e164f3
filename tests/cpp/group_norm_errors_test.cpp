// Every validation error of group_norm_fwd/bwd: the right ErrorCode and a message that names the
// argument and says what was expected.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::GroupNormParams;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;

// [N, C, S] = [3, 8, 5] views of [3, 40] buffers.
TensorView ncs(HostTensor& t) {
  TensorView v = t.view();
  v.ndim = 3;
  v.sizes[1] = 8;
  v.sizes[2] = 5;
  v.strides[0] = 40;
  v.strides[1] = 5;
  v.strides[2] = 1;
  return v;
}

class GroupNormErrors : public ::testing::Test {
 protected:
  HostTensor x{DType::kBFloat16, {3, 40}}, y{DType::kBFloat16, {3, 40}};
  HostTensor dy{DType::kBFloat16, {3, 40}}, dx{DType::kBFloat16, {3, 40}};
  HostTensor w{DType::kBFloat16, {8}}, b{DType::kFloat32, {8}};
  HostTensor dw{DType::kBFloat16, {8}}, db{DType::kFloat32, {8}};
  HostTensor mean{DType::kFloat32, {12}}, rstd{DType::kFloat32, {12}};
  std::vector<std::uint8_t> workspace = std::vector<std::uint8_t>(1 << 12);
  GroupNormParams p{4, 1e-5f};

  void fwd(const TensorView& xv, const TensorView& yv, const TensorView& wv, const TensorView& mv,
           GroupNormParams params) {
    tigon::group_norm_fwd(params, xv, wv, b.view(), yv, mv, rstd.view());
  }
  void bwd(const TensorView& dyv, const TensorView& dxv, const TensorView& dwv,
           const TensorView& dbv, tigon::Workspace ws) {
    tigon::group_norm_bwd(p, dyv, ncs(x), w.view(), mean.view(), rstd.view(), dxv, dwv, dbv, ws);
  }
  tigon::Workspace ws() { return {workspace.data(), workspace.size()}; }
};

TEST_F(GroupNormErrors, ValidCallsSucceed) {
  fwd(ncs(x), ncs(y), w.view(), mean.view(), p);
  bwd(ncs(dy), ncs(dx), dw.view(), db.view(), ws());
  bwd(ncs(dy), ncs(dy), dw.view(), TensorView{}, ws());  // in place, no dB
}

TEST_F(GroupNormErrors, Params) {
  GroupNormParams bad = p;
  bad.groups = 3;
  expect_error([&] { fwd(ncs(x), ncs(y), w.view(), mean.view(), bad); },
               ErrorCode::kInvalidArgument, "groups", "a divisor of x's channel count 8",
               "group_norm_fwd");
  bad.groups = 0;
  expect_error([&] { fwd(ncs(x), ncs(y), w.view(), mean.view(), bad); },
               ErrorCode::kInvalidArgument, "groups", ">= 1");
  bad = p;
  bad.eps = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { fwd(ncs(x), ncs(y), w.view(), mean.view(), bad); },
               ErrorCode::kInvalidArgument, "eps", ">= 0");
}

TEST_F(GroupNormErrors, Shapes) {
  TensorView one_dim = x.view();
  one_dim.ndim = 1;
  one_dim.sizes[0] = 120;
  one_dim.strides[0] = 1;
  expect_error([&] { fwd(one_dim, one_dim, w.view(), mean.view(), p); },
               ErrorCode::kInvalidArgument, "x", "2 or more dimensions");
  TensorView strided = ncs(x);
  strided.strides[1] = 6;  // channels not packed: a sample is not contiguous
  expect_error([&] { fwd(strided, ncs(y), w.view(), mean.view(), p); }, ErrorCode::kInvalidArgument,
               "x", "contiguous samples");
  TensorView other_shape = ncs(y);
  other_shape.sizes[2] = 4;
  expect_error([&] { fwd(ncs(x), other_shape, w.view(), mean.view(), p); },
               ErrorCode::kInvalidArgument, "y", "shape [3, 8, 5]");
  HostTensor w_wrong{DType::kBFloat16, {7}};
  expect_error([&] { fwd(ncs(x), ncs(y), w_wrong.view(), mean.view(), p); },
               ErrorCode::kInvalidArgument, "weight", "shape [8] (x's channel count)");
  HostTensor mean_wrong{DType::kFloat32, {3}};
  expect_error([&] { fwd(ncs(x), ncs(y), w.view(), mean_wrong.view(), p); },
               ErrorCode::kInvalidArgument, "mean", "12 elements");
}

TEST_F(GroupNormErrors, Dtypes) {
  HostTensor y_half{DType::kFloat16, {3, 40}};
  expect_error([&] { fwd(ncs(x), ncs(y_half), w.view(), mean.view(), p); }, ErrorCode::kTypeError,
               "y", "bfloat16");
  HostTensor w_half{DType::kFloat16, {8}};
  expect_error([&] { fwd(ncs(x), ncs(y), w_half.view(), mean.view(), p); }, ErrorCode::kTypeError,
               "weight", "bfloat16 (x's) or float32");
  HostTensor dw_float{DType::kFloat32, {8}};
  expect_error([&] { bwd(ncs(dy), ncs(dx), dw_float.view(), db.view(), ws()); },
               ErrorCode::kTypeError, "dw", "weight's dtype");
}

TEST_F(GroupNormErrors, Backward) {
  expect_error([&] { bwd(ncs(dy), ncs(dx), TensorView{}, db.view(), ws()); },
               ErrorCode::kInvalidArgument, "dw", "a tensor (there is a weight)");
  expect_error(
      [&] {
        bwd(ncs(dy), ncs(dx), dw.view(), db.view(), {workspace.data(), 8});
      },
      ErrorCode::kInvalidArgument, "workspace", "group_norm_bwd_workspace_size");
}

}  // namespace
