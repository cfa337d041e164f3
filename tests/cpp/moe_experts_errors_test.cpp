// Every validation error of moe_experts fwd/bwd: the right ErrorCode and a message naming the
// argument and what was expected.
#include <gtest/gtest.h>

#include <cstdint>
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

constexpr std::int64_t kN = 4, kK = 2, kE = 3, kH = 8, kI = 4;

TensorView as3(TensorView v, std::int64_t a, std::int64_t b, std::int64_t c) {
  v.ndim = 3;
  v.sizes[0] = a, v.sizes[1] = b, v.sizes[2] = c;
  v.strides[0] = b * c, v.strides[1] = c, v.strides[2] = 1;
  return v;
}

class MoeExpertsErrors : public ::testing::Test {
 protected:
  HostTensor hidden{DType::kBFloat16, {kN, kH}};
  HostTensor weights{DType::kFloat32, {kN, kK}};
  HostTensor w1{DType::kBFloat16, {kE * 2 * kI, kH}};
  HostTensor w2{DType::kBFloat16, {kE * kH, kI}};
  HostTensor out{DType::kBFloat16, {kN, kH}};
  HostTensor saved_a{DType::kBFloat16, {kN * kK, 2 * kI}};
  HostTensor saved_d{DType::kBFloat16, {kN * kK, kH}};
  HostTensor dout{DType::kBFloat16, {kN, kH}};
  HostTensor dhidden{DType::kBFloat16, {kN, kH}};
  std::vector<std::int64_t> ids{0, 1, 2, 0, 1, 2, 3, 0};  // 3 == E: a dropped slot
  std::vector<std::int64_t> offsets = std::vector<std::int64_t>(kE + 1);
  std::vector<std::int64_t> sorted = std::vector<std::int64_t>(kN * kK);
  std::vector<unsigned char> ws = std::vector<unsigned char>(1 << 20);

  tigon::MoeExpertsInputs in() {
    return {hidden.view(), TensorView::contiguous(ids.data(), DType::kInt64, {kN, kK}),
            weights.view(), as3(w1.view(), kE, 2 * kI, kH), as3(w2.view(), kE, kH, kI)};
  }
  tigon::MoeExpertsRouting routing() {
    return {TensorView::contiguous(offsets.data(), DType::kInt64, {kE + 1}),
            TensorView::contiguous(sorted.data(), DType::kInt64, {kN * kK})};
  }
  tigon::MoeExpertsSaved saved() { return {saved_a.view(), saved_d.view()}; }
  void fwd(const tigon::MoeExpertsInputs& inputs) {
    tigon::moe_experts_fwd({}, inputs, routing(), saved(), out.view(), {ws.data(), ws.size()});
  }
};

TEST_F(MoeExpertsErrors, ValidCallsSucceed) {
  fwd(in());
  tigon::moe_experts_fwd({}, in(), routing(), {}, out.view(), {ws.data(), ws.size()});
  tigon::moe_experts_bwd({}, in(), routing(), saved(), dout.view(), {dhidden.view(), {}, {}, {}},
                         {ws.data(), ws.size()});
}

TEST_F(MoeExpertsErrors, Inputs) {
  auto bad = in();
  bad.topk_ids.dtype = DType::kFloat32;
  expect_error([&] { fwd(bad); }, ErrorCode::kTypeError, "topk_ids", "int64", "moe_experts");
  bad = in();
  bad.topk_ids.sizes[0] = kN + 1;
  expect_error([&] { fwd(bad); }, ErrorCode::kInvalidArgument, "topk_ids", "[4, K]");
  bad = in();
  bad.topk_weights.dtype = DType::kFloat16;
  expect_error([&] { fwd(bad); }, ErrorCode::kTypeError, "topk_weights", "float32 or bfloat16");
  bad = in();
  bad.w_down.sizes[2] = kI + 1;
  expect_error([&] { fwd(bad); }, ErrorCode::kInvalidArgument, "w_down", "shape [3, 8, 4]");
  bad = in();
  bad.w_gate_up.sizes[1] = 2 * kI + 1;
  expect_error([&] { fwd(bad); }, ErrorCode::kInvalidArgument, "w_gate_up", "[E, 2I, 8]");
  bad = in();
  bad.w_gate_up.dtype = DType::kFloat32;
  expect_error([&] { fwd(bad); }, ErrorCode::kTypeError, "w_gate_up", "bfloat16");
  bad = in();
  bad.hidden.ndim = 1;
  expect_error([&] { fwd(bad); }, ErrorCode::kInvalidArgument, "hidden", "[N, H]");
  ids[5] = kE + 1;
  expect_error([&] { fwd(in()); }, ErrorCode::kInvalidArgument, "topk_ids", "[0, 3]");
  ids[5] = -1;
  expect_error([&] { fwd(in()); }, ErrorCode::kInvalidArgument, "topk_ids", "[0, 3]");
}

TEST_F(MoeExpertsErrors, OutputsRoutingSavedWorkspace) {
  expect_error(
      [&] {
        tigon::moe_experts_fwd({}, in(), routing(), {saved_a.view(), {}}, out.view(),
                               {ws.data(), ws.size()});
      },
      ErrorCode::kInvalidArgument, "saved.expert_out", "when gate_up is saved");
  expect_error(
      [&] {
        tigon::moe_experts_bwd({}, in(), routing(), {}, dout.view(), {}, {ws.data(), ws.size()});
      },
      ErrorCode::kInvalidArgument, "saved.gate_up", "the forward's");
  auto r = routing();
  r.sorted_slots.sizes[0] = 3;
  expect_error(
      [&] {
        tigon::moe_experts_fwd({}, in(), r, saved(), out.view(), {ws.data(), ws.size()});
      },
      ErrorCode::kInvalidArgument, "sorted_slots", "shape [8]");
  TensorView o = out.view();
  o.dtype = DType::kFloat16;
  expect_error(
      [&] {
        tigon::moe_experts_fwd({}, in(), routing(), saved(), o, {ws.data(), ws.size()});
      },
      ErrorCode::kTypeError, "out", "bfloat16");
  expect_error(
      [&] {
        tigon::moe_experts_fwd({}, in(), routing(), saved(), out.view(), {ws.data(), 16});
      },
      ErrorCode::kInvalidArgument, "workspace", "moe_experts_fwd_workspace_size");
  HostTensor dw1{DType::kFloat16, {kE * 2 * kI, kH}};
  expect_error(
      [&] {
        tigon::moe_experts_bwd({}, in(), routing(), saved(), dout.view(),
                               {{}, {}, as3(dw1.view(), kE, 2 * kI, kH), {}},
                               {ws.data(), ws.size()});
      },
      ErrorCode::kTypeError, "grad_w_gate_up", "float32 or bfloat16");
  HostTensor dweights{DType::kBFloat16, {kN, kK}};
  expect_error(
      [&] {
        tigon::moe_experts_bwd({}, in(), routing(), saved(), dout.view(),
                               {{}, dweights.view(), {}, {}}, {ws.data(), ws.size()});
      },
      ErrorCode::kTypeError, "grad_topk_weights", "float32");
}

}  // namespace
