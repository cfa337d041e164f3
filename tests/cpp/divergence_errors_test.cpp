// Every validation error of kl_div / jsd / tvd: the right ErrorCode and a message that names the
// argument and says what was expected and what was given.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "host_tensor.h"
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::Reduction;
using tigon::TensorView;
using tigon::testing::expect_error;
using tigon::testing::HostTensor;

class DivergenceErrors : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3, kVocab = 16;
  HostTensor x{DType::kBFloat16, {kRows, kVocab}};
  HostTensor t{DType::kBFloat16, {kRows, kVocab}};
  HostTensor g{DType::kBFloat16, {kRows, kVocab}};
  std::vector<std::int64_t> labels = std::vector<std::int64_t>(kRows, 0);
  std::vector<std::uint8_t> workspace = std::vector<std::uint8_t>(1 << 12);
  float loss = 0.0f, upstream = 1.0f;

  TensorView scalar(float* v) { return TensorView::contiguous(v, DType::kFloat32, {}); }
  TensorView labels_view(std::int64_t n) {
    return TensorView::contiguous(labels.data(), DType::kInt64, {n});
  }
  tigon::Workspace ws() { return {workspace.data(), workspace.size()}; }
  tigon::DivergenceInputs in() { return {x.view(), t.view(), {}}; }
};

TEST_F(DivergenceErrors, Params) {
  tigon::KlDivParams kl;
  kl.reduction = static_cast<Reduction>(9);
  expect_error([&] { tigon::kl_div_fwd(kl, in(), scalar(&loss), {}, ws()); },
               ErrorCode::kInvalidArgument, "reduction", "kBatchMean", "kl_div_fwd");
  tigon::JsdParams jsd;
  jsd.beta = 1.5f;
  expect_error([&] { tigon::jsd_fwd(jsd, in(), scalar(&loss), {}, ws()); },
               ErrorCode::kInvalidArgument, "beta", "[0, 1]", "jsd_fwd");
  jsd.beta = NAN;
  expect_error([&] { tigon::jsd_bwd(jsd, in(), scalar(&upstream), g.view(), ws()); },
               ErrorCode::kInvalidArgument, "beta", "[0, 1]", "jsd_bwd");
  tigon::TvdParams tvd;
  tvd.reduction = static_cast<Reduction>(4);
  expect_error([&] { tigon::tvd_workspace_size(tvd, in()); }, ErrorCode::kInvalidArgument,
               "reduction", "kNone", "tvd_workspace_size");
}

TEST_F(DivergenceErrors, InputAndTarget) {
  const tigon::TvdParams p;
  HostTensor ti(DType::kFloat32, {kRows, kVocab});
  expect_error(
      [&] {
        tigon::tvd_fwd(p, {x.view(), ti.view(), {}}, scalar(&loss), {}, ws());
      },
      ErrorCode::kTypeError, "target", "dtype bfloat16 (input's dtype)", "tvd_fwd");
  HostTensor short_t(DType::kBFloat16, {kRows, kVocab - 1});
  expect_error(
      [&] {
        tigon::tvd_fwd(p, {x.view(), short_t.view(), {}}, scalar(&loss), {}, ws());
      },
      ErrorCode::kInvalidArgument, "target", "shape [3, 16] (input's shape)");
  TensorView columns = x.view();
  columns.strides[1] = 2;
  expect_error(
      [&] {
        tigon::tvd_fwd(p, {columns, t.view(), {}}, scalar(&loss), {}, ws());
      },
      ErrorCode::kInvalidArgument, "input", "unit stride");
  TensorView ints = x.view();
  ints.dtype = DType::kInt64;
  expect_error(
      [&] {
        tigon::tvd_fwd(p, {ints, t.view(), {}}, scalar(&loss), {}, ws());
      },
      ErrorCode::kTypeError, "input", "float32, float16 or bfloat16");
  TensorView on_gpu = x.view();
  on_gpu.device = tigon::Device::cuda(0);
  if (!tigon::has_cuda_backend()) {
    expect_error(
        [&] {
          tigon::tvd_fwd(p, {on_gpu, t.view(), {}}, scalar(&loss), {}, ws());
        },
        ErrorCode::kBackendUnavailable, "input", "CPU tensor");
  }
  TensorView target_gpu = t.view();
  target_gpu.device = tigon::Device::cuda(0);
  expect_error(
      [&] {
        tigon::tvd_fwd(p, {x.view(), target_gpu, {}}, scalar(&loss), {}, ws());
      },
      ErrorCode::kInvalidArgument, "target", "input's device");
}

TEST_F(DivergenceErrors, Labels) {
  expect_error(
      [&] {
        tigon::kl_div_fwd({}, {x.view(), t.view(), labels_view(kRows)}, scalar(&loss), {}, ws());
      },
      ErrorCode::kInvalidArgument, "labels", "no labels", "kl_div_fwd");
  const tigon::JsdParams p;
  expect_error(
      [&] {
        tigon::jsd_fwd(p, {x.view(), t.view(), labels_view(kRows - 1)}, scalar(&loss), {}, ws());
      },
      ErrorCode::kInvalidArgument, "labels", "3 elements (one per row of input)");
  TensorView floats = labels_view(kRows);
  floats.dtype = DType::kFloat32;
  expect_error(
      [&] {
        tigon::jsd_fwd(p, {x.view(), t.view(), floats}, scalar(&loss), {}, ws());
      },
      ErrorCode::kTypeError, "labels", "dtype int64");
  TensorView strided = TensorView::contiguous(labels.data(), DType::kInt64, {2});
  strided.strides[0] = 2;
  HostTensor two_rows_x(DType::kBFloat16, {2, kVocab}), two_rows_t(DType::kBFloat16, {2, kVocab});
  expect_error(
      [&] {
        tigon::jsd_fwd(p, {two_rows_x.view(), two_rows_t.view(), strided}, scalar(&loss), {}, ws());
      },
      ErrorCode::kInvalidArgument, "labels", "contiguous");
}

TEST_F(DivergenceErrors, LossAndGradients) {
  tigon::KlDivParams kl;
  kl.reduction = Reduction::kSum;
  HostTensor bf16_loss(DType::kBFloat16, {1});
  expect_error([&] { tigon::kl_div_fwd(kl, in(), bf16_loss.view(), {}, ws()); },
               ErrorCode::kTypeError, "loss", "dtype float32");
  float two[2];
  expect_error(
      [&] {
        tigon::kl_div_fwd(kl, in(), TensorView::contiguous(two, DType::kFloat32, {2}), {}, ws());
      },
      ErrorCode::kInvalidArgument, "loss", "one element (reduction sum)");
  kl.reduction = Reduction::kNone;
  HostTensor half_loss(DType::kFloat16, {kRows, kVocab});
  expect_error([&] { tigon::kl_div_fwd(kl, in(), half_loss.view(), {}, ws()); },
               ErrorCode::kTypeError, "loss", "dtype float32 or bfloat16 (input's)");
  expect_error([&] { tigon::kl_div_fwd(kl, in(), scalar(&loss), {}, ws()); },
               ErrorCode::kInvalidArgument, "loss", "shape [3, 16] (input's shape)");
  expect_error([&] { tigon::kl_div_bwd(kl, in(), scalar(&upstream), g.view(), ws()); },
               ErrorCode::kInvalidArgument, "grad_loss", "input's shape", "kl_div_bwd");
  const tigon::TvdParams tvd;
  HostTensor f32_grad(DType::kFloat32, {kRows, kVocab});
  expect_error([&] { tigon::tvd_fwd(tvd, in(), scalar(&loss), f32_grad.view(), ws()); },
               ErrorCode::kTypeError, "grad_input", "dtype bfloat16 (input's dtype)");
  expect_error([&] { tigon::tvd_bwd(tvd, in(), scalar(&upstream), {}, ws()); },
               ErrorCode::kInvalidArgument, "grad_input", "a tensor");
  HostTensor wide(DType::kBFloat16, {kRows, kVocab}, kVocab + 4);
  tigon::DivergenceInputs wide_in{wide.view(), t.view(), {}};
  TensorView into_input = wide.view();
  into_input.strides[0] = kVocab;
  expect_error([&] { tigon::tvd_fwd(tvd, wide_in, scalar(&loss), into_input, ws()); },
               ErrorCode::kInvalidArgument, "grad_input", "input's row stride");
}

TEST_F(DivergenceErrors, Workspace) {
  const tigon::TvdParams p;
  const std::size_t needed = tigon::tvd_workspace_size(p, in());
  ASSERT_GT(needed, 0u);
  expect_error(
      [&] {
        tigon::tvd_fwd(p, in(), scalar(&loss), {}, {workspace.data(), needed - 1});
      },
      ErrorCode::kInvalidArgument, "workspace", "tvd_workspace_size");
}

}  // namespace
