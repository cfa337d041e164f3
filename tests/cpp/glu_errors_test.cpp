// Every validation error of swiglu/geglu fwd/bwd: the right ErrorCode and a message naming the
// argument and what was expected.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;

class GluErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3, kWidth = 16;
  HostTensor a{DType::kBFloat16, {kRows, kWidth}};
  HostTensor b{DType::kBFloat16, {kRows, kWidth}};
  HostTensor y{DType::kBFloat16, {kRows, kWidth}};
  HostTensor dy{DType::kBFloat16, {kRows, kWidth}};
  HostTensor da{DType::kBFloat16, {kRows, kWidth}};
  HostTensor db{DType::kBFloat16, {kRows, kWidth}};
};

TEST_F(GluErrors, ValidCallsSucceed) {
  tigon::swiglu_fwd(a.view(), b.view(), y.view());
  tigon::geglu_fwd(a.view(), b.view(), y.view());
  tigon::swiglu_bwd(dy.view(), a.view(), b.view(), da.view(), db.view());
  tigon::geglu_bwd(dy.view(), a.view(), b.view(), a.view(), b.view());  // in place
}

TEST_F(GluErrors, MultipliersMustBeFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double bad : {inf, -inf, nan, 1e39}) {  // 1e39: finite, but not as float32
    expect_error(
        [&] {
          tigon::swiglu_fwd(a.view(), b.view(), y.view(), {bad, 1.0});
        },
        ErrorCode::kInvalidArgument, "gate_multiplier", "a finite value", "swiglu_fwd");
    expect_error(
        [&] {
          tigon::geglu_fwd(a.view(), b.view(), y.view(), {1.0, bad});
        },
        ErrorCode::kInvalidArgument, "down_multiplier", "a finite value", "geglu_fwd");
    expect_error(
        [&] {
          tigon::swiglu_bwd(dy.view(), a.view(), b.view(), da.view(), db.view(), {bad, 2.0});
        },
        ErrorCode::kInvalidArgument, "gate_multiplier", "a finite value", "swiglu_bwd");
    expect_error(
        [&] {
          tigon::geglu_bwd(dy.view(), a.view(), b.view(), da.view(), db.view(), {0.5, bad});
        },
        ErrorCode::kInvalidArgument, "down_multiplier", "a finite value", "geglu_bwd");
  }
}

TEST_F(GluErrors, DtypeMismatchNamesTheArgument) {
  HostTensor f(DType::kFloat32, {kRows, kWidth});
  expect_error([&] { tigon::swiglu_fwd(a.view(), f.view(), y.view()); }, ErrorCode::kTypeError, "b",
               "expected", "swiglu_fwd");
  expect_error([&] { tigon::geglu_fwd(a.view(), b.view(), f.view()); }, ErrorCode::kTypeError, "y",
               "expected", "geglu_fwd");
  expect_error([&] { tigon::swiglu_bwd(f.view(), a.view(), b.view(), da.view(), db.view()); },
               ErrorCode::kTypeError, "dy", "expected", "swiglu_bwd");
  expect_error([&] { tigon::geglu_bwd(dy.view(), a.view(), b.view(), f.view(), db.view()); },
               ErrorCode::kTypeError, "da", "expected", "geglu_bwd");
  TensorView bad = a.view();
  bad.dtype = static_cast<DType>(9);
  expect_error([&] { tigon::swiglu_fwd(bad, b.view(), y.view()); }, ErrorCode::kTypeError, "a");
}

TEST_F(GluErrors, ShapeMismatchNamesTheArgument) {
  HostTensor small(DType::kBFloat16, {kRows, kWidth - 1});
  expect_error([&] { tigon::swiglu_fwd(a.view(), small.view(), y.view()); },
               ErrorCode::kInvalidArgument, "b");
  expect_error([&] { tigon::swiglu_fwd(a.view(), b.view(), small.view()); },
               ErrorCode::kInvalidArgument, "y");
  expect_error([&] { tigon::swiglu_bwd(dy.view(), a.view(), b.view(), da.view(), small.view()); },
               ErrorCode::kInvalidArgument, "db");
}

TEST_F(GluErrors, LayoutErrors) {
  TensorView t = a.view();
  t.strides[1] = 2;  // last dimension not contiguous
  expect_error([&] { tigon::swiglu_fwd(t, b.view(), y.view()); }, ErrorCode::kInvalidArgument, "a");
  TensorView none;
  expect_error([&] { tigon::swiglu_fwd(none, b.view(), y.view()); }, ErrorCode::kInvalidArgument,
               "a");
  TensorView null_b = b.view();
  null_b.data = nullptr;
  expect_error([&] { tigon::swiglu_fwd(a.view(), null_b, y.view()); }, ErrorCode::kInvalidArgument,
               "b");
}

TEST_F(GluErrors, DeviceErrors) {
  TensorView g = b.view();
  g.device = tigon::Device::cuda(0);
  // b on another device than a: a device error on b (checked before any backend runs).
  expect_error([&] { tigon::swiglu_fwd(a.view(), g, y.view()); }, ErrorCode::kInvalidArgument, "b");
  if (!tigon::has_cuda_backend()) {
    TensorView ga = a.view(), gb = b.view(), gy = y.view();
    ga.device = gb.device = gy.device = tigon::Device::cuda(0);
    expect_error([&] { tigon::swiglu_fwd(ga, gb, gy); }, ErrorCode::kBackendUnavailable, "a");
  }
}

TEST_F(GluErrors, OverlappingOutputsAreRejected) {
  // y written over the inputs.
  expect_error([&] { tigon::swiglu_fwd(a.view(), b.view(), a.view()); },
               ErrorCode::kInvalidArgument, "y");
  // da into b, db into a, da into dy, both into one buffer.
  expect_error([&] { tigon::swiglu_bwd(dy.view(), a.view(), b.view(), b.view(), db.view()); },
               ErrorCode::kInvalidArgument, "da");
  expect_error([&] { tigon::swiglu_bwd(dy.view(), a.view(), b.view(), da.view(), a.view()); },
               ErrorCode::kInvalidArgument, "db");
  expect_error([&] { tigon::swiglu_bwd(dy.view(), a.view(), b.view(), dy.view(), db.view()); },
               ErrorCode::kInvalidArgument, "da");
  expect_error([&] { tigon::swiglu_bwd(dy.view(), a.view(), b.view(), da.view(), da.view()); },
               ErrorCode::kInvalidArgument, "da");
  // A view shifted by one element: partial overlap with a.
  TensorView shifted = a.view();
  shifted.sizes[1] = kWidth - 1;
  TensorView a_short = a.view();
  a_short.sizes[1] = kWidth - 1;
  TensorView b_short = b.view(), dy_short = dy.view(), db_short = db.view();
  b_short.sizes[1] = dy_short.sizes[1] = db_short.sizes[1] = kWidth - 1;
  shifted.data = static_cast<std::uint8_t*>(shifted.data) + 2;
  expect_error([&] { tigon::swiglu_bwd(dy_short, a_short, b_short, shifted, db_short); },
               ErrorCode::kInvalidArgument, "da");
  // In place (same pointer as a) but with a different row stride than a.
  HostTensor wide(DType::kBFloat16, {kRows, kWidth}, 2 * kWidth);
  TensorView packed = wide.view();
  packed.strides[0] = kWidth;
  expect_error([&] { tigon::swiglu_bwd(dy.view(), wide.view(), b.view(), packed, db.view()); },
               ErrorCode::kInvalidArgument, "da");
}

TEST_F(GluErrors, GateUpHalvesAreNotAnOverlap) {
  HostTensor gate_up(DType::kBFloat16, {kRows, 2 * kWidth});
  TensorView g = gate_up.view(), u = gate_up.view();
  g.sizes[1] = u.sizes[1] = kWidth;
  u.data = static_cast<std::uint8_t*>(u.data) + kWidth * 2;
  tigon::swiglu_fwd(g, u, y.view());
  tigon::swiglu_bwd(dy.view(), g, u, g, u);
  // Writing y into the gate half while reading it is rejected.
  expect_error([&] { tigon::swiglu_fwd(g, u, g); }, ErrorCode::kInvalidArgument, "y");
}

TEST(GluActivationName, Names) {
  EXPECT_STREQ(tigon::glu_activation_name(tigon::GluActivation::kSilu), "silu");
  EXPECT_STREQ(tigon::glu_activation_name(tigon::GluActivation::kGeluTanh), "gelu_tanh");
}

TEST(GluActivationName, BadActivation) {
  HostTensor a(DType::kFloat32, {2, 4});
  expect_error(
      [&] { tigon::glu_fwd(static_cast<tigon::GluActivation>(5), a.view(), a.view(), a.view()); },
      ErrorCode::kInvalidArgument, "activation");
}

}  // namespace
