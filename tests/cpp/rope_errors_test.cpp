// Every validation error of rope_fwd / rope_bwd: the right ErrorCode and a message that names the
// argument and says what was expected and what was given.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "cpp/strided_tensor.h"
#include "cpp/test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::StridedTensor;

class RopeErrors : public ::testing::Test {
 protected:
  StridedTensor q{DType::kBFloat16, {2, 4, 3, 8}};
  StridedTensor k{DType::kBFloat16, {2, 2, 3, 8}};
  StridedTensor cos{DType::kBFloat16, {2, 1, 3, 8}};
  StridedTensor sin{DType::kBFloat16, {2, 1, 3, 8}};
  StridedTensor yq{DType::kBFloat16, {2, 4, 3, 8}};
  StridedTensor yk{DType::kBFloat16, {2, 2, 3, 8}};

  void fwd(const TensorView& qv, const TensorView& kv, const TensorView& cv, const TensorView& sv,
           const TensorView& yqv, const TensorView& ykv) {
    tigon::rope_fwd(qv, kv, cv, sv, yqv, ykv);
  }
};

TEST_F(RopeErrors, ValidCallPasses) {
  fwd(q.view(), k.view(), cos.view(), sin.view(), yq.view(), yk.view());
  tigon::rope_bwd(yq.view(), yk.view(), cos.view(), sin.view(), q.view(), k.view());
}

TEST_F(RopeErrors, QNot4D) {
  TensorView v = q.view();
  v.ndim = 3;
  expect_error([&] { fwd(v, k.view(), cos.view(), sin.view(), yq.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "q", "a 4-D tensor");
}

TEST_F(RopeErrors, OddRotaryDim) {
  StridedTensor c7(DType::kBFloat16, {2, 1, 3, 7});
  expect_error([&] { fwd(q.view(), k.view(), c7.view(), c7.view(), yq.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "cos", "an even last dimension");
}

TEST_F(RopeErrors, RotaryDimLargerThanHeadDim) {
  StridedTensor c16(DType::kBFloat16, {2, 1, 3, 16});
  expect_error([&] { fwd(q.view(), k.view(), c16.view(), c16.view(), yq.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "q", "a last dimension >= the rotary dim 16");
}

TEST_F(RopeErrors, CosDoesNotBroadcast) {
  StridedTensor c(DType::kBFloat16, {2, 1, 5, 8});
  expect_error([&] { fwd(q.view(), k.view(), c.view(), c.view(), yq.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "cos", "broadcasts to q's [2, 4, 3, 8]");
  StridedTensor c_heads(DType::kBFloat16, {2, 4, 3, 8});  // per-head cos cannot serve k's 2 heads
  expect_error(
      [&] { fwd(q.view(), k.view(), c_heads.view(), c_heads.view(), yq.view(), yk.view()); },
      ErrorCode::kInvalidArgument, "cos", "broadcasts to k's");
}

TEST_F(RopeErrors, SinDtypeDiffersFromCos) {
  StridedTensor s32(DType::kFloat32, {2, 1, 3, 8});
  expect_error([&] { fwd(q.view(), k.view(), cos.view(), s32.view(), yq.view(), yk.view()); },
               ErrorCode::kTypeError, "sin", "dtype bfloat16 (cos's dtype)");
}

TEST_F(RopeErrors, SinRotaryDimDiffers) {
  StridedTensor s4(DType::kBFloat16, {2, 1, 3, 4});
  expect_error([&] { fwd(q.view(), k.view(), cos.view(), s4.view(), yq.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "sin", "last dimension 8");
}

TEST_F(RopeErrors, KDtypeDiffersFromQ) {
  StridedTensor k32(DType::kFloat32, {2, 2, 3, 8});
  expect_error([&] { fwd(q.view(), k32.view(), cos.view(), sin.view(), yq.view(), yk.view()); },
               ErrorCode::kTypeError, "k", "dtype bfloat16 (q's dtype)");
}

TEST_F(RopeErrors, OutputDtypeIsThePromotedOne) {
  StridedTensor c32(DType::kFloat32, {2, 1, 3, 8});
  expect_error([&] { fwd(q.view(), k.view(), c32.view(), c32.view(), yq.view(), yk.view()); },
               ErrorCode::kTypeError, "y_q", "dtype float32 (rope_output_dtype");
}

TEST_F(RopeErrors, OutputShapeDiffers) {
  StridedTensor bad(DType::kBFloat16, {2, 4, 3, 6});
  expect_error([&] { fwd(q.view(), k.view(), cos.view(), sin.view(), bad.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "y_q", "shape [2, 4, 3, 8] (q's shape)");
}

TEST_F(RopeErrors, KWithoutItsOutput) {
  expect_error([&] { fwd(q.view(), k.view(), cos.view(), sin.view(), yq.view(), {}); },
               ErrorCode::kInvalidArgument, "y_k", "a tensor exactly when k is given");
}

TEST_F(RopeErrors, OverlappingOutput) {
  TensorView shifted = q.view();
  shifted.data = static_cast<char*>(shifted.data) + 2;  // one element on: overlaps q
  expect_error([&] { fwd(q.view(), {}, cos.view(), sin.view(), shifted, {}); },
               ErrorCode::kInvalidArgument, "y_q", "memory disjoint from q");
}

TEST_F(RopeErrors, InPlaceNeedsTheSameLayout) {
  TensorView other = q.view();
  other.strides[1] = 8;  // same data pointer, heads and sequence swapped
  other.strides[2] = 4 * 8;
  expect_error([&] { fwd(q.view(), {}, cos.view(), sin.view(), other, {}); },
               ErrorCode::kInvalidArgument, "y_q", "when written in place");
}

TEST_F(RopeErrors, RepeatedOutputElements) {
  StridedTensor out(DType::kBFloat16, {2, 4, 3, 8});
  TensorView v = out.view();
  v.strides[1] = 0;
  expect_error([&] { fwd(q.view(), {}, cos.view(), sin.view(), v, {}); },
               ErrorCode::kInvalidArgument, "y_q", "without repeated elements");
}

TEST_F(RopeErrors, NegativeStride) {
  TensorView v = q.view();
  v.strides[2] = -8;
  expect_error([&] { fwd(v, {}, cos.view(), sin.view(), yq.view(), {}); },
               ErrorCode::kInvalidArgument, "q", "non-negative sizes and strides");
}

TEST_F(RopeErrors, BackwardGradientDtype) {
  StridedTensor c32(DType::kFloat32, {2, 1, 3, 8});
  // dx bf16 with float32 cos: dy must be float32.
  expect_error([&] { tigon::rope_bwd(yq.view(), {}, c32.view(), c32.view(), q.view(), {}); },
               ErrorCode::kTypeError, "dy_q", "dtype float32 (rope_output_dtype of dx's dtype");
}

TEST_F(RopeErrors, DeviceMismatch) {
  TensorView c = cos.view();
  c.device = tigon::Device::cuda(0);
  expect_error([&] { fwd(q.view(), k.view(), c, sin.view(), yq.view(), yk.view()); },
               ErrorCode::kInvalidArgument, "cos", "a tensor on cpu");
}

TEST_F(RopeErrors, NullDataPointer) {
  TensorView v = q.view();
  v.data = nullptr;
  expect_error([&] { fwd(v, {}, cos.view(), sin.view(), yq.view(), {}); },
               ErrorCode::kInvalidArgument, "q", "a non-null data pointer");
}

}  // namespace
