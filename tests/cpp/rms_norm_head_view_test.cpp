// RMSNorm over head_dim of [B, T, heads, D] views (QK-norm, as Qwen3's q_norm / k_norm) through
// the C++ API: a view whose rows are one stride apart (contiguous, or heads padded to a longer
// stride) is read in place and gives, bit for bit, what the same rows give as a 2-D [rows, D]
// view of the same buffer; a view whose rows sit at two strides (a fused QKV projection's q part,
// or a transposed [B, heads, T, D] view) is rejected by name, not misread (the torch layer copies
// it first: docs/ops/rms_norm.md, "QK-norm").
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::ErrorCode;
using tigon::RmsNormParams;
using tigon::TensorView;
using tigon::testing::expect_error;

constexpr std::int64_t kB = 2, kT = 5, kHeads = 3, kD = 128;
constexpr std::int64_t kRows = kB * kT * kHeads;

TensorView view4(float* data, const std::int64_t (&strides)[4]) {
  TensorView v = TensorView::contiguous(data, DType::kFloat32, {kB, kT, kHeads, kD});
  for (int d = 0; d < 4; ++d) v.strides[d] = strides[d];
  return v;
}

TensorView rows_view(float* data, std::int64_t row_stride) {
  TensorView v = TensorView::contiguous(data, DType::kFloat32, {kRows, kD});
  v.strides[0] = row_stride;
  return v;
}

struct Results {
  std::vector<float> y, rstd, dx, dw;
};

// Forward and backward over buffers laid out as `x` (y, dy and dx laid out alike).
Results run(const TensorView& x, const TensorView& y, const TensorView& dy, const TensorView& dx,
            std::vector<float>& w) {
  const RmsNormParams p{};
  Results r;
  r.rstd.assign(kRows, 0.0f);
  r.dw.assign(kD, 0.0f);
  const TensorView wv = TensorView::contiguous(w.data(), DType::kFloat32, {kD});
  const TensorView rstd = TensorView::contiguous(r.rstd.data(), DType::kFloat32, {kRows});
  tigon::rms_norm_fwd(p, x, wv, y, rstd);
  std::vector<unsigned char> ws(tigon::rms_norm_bwd_workspace_size(p, x, wv));
  tigon::rms_norm_bwd(p, dy, x, wv, rstd, dx,
                      TensorView::contiguous(r.dw.data(), DType::kFloat32, {kD}),
                      {ws.data(), ws.size()});
  return r;
}

TEST(RmsNormHeadView, RowsOneStrideApartAreReadInPlace) {
  for (const std::int64_t pad : {std::int64_t{0}, std::int64_t{32}}) {
    SCOPED_TRACE(pad ? "heads padded to a longer stride" : "contiguous q_proj(x).view(B, T, H, D)");
    const std::int64_t s = kD + pad;  // every row (b, t, head) starts s elements after the last
    const std::int64_t strides[4] = {kT * kHeads * s, kHeads * s, s, 1};
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> x(kRows * s), dy(kRows * s), w(kD);
    for (float& v : x) v = normal(rng);
    for (float& v : dy) v = normal(rng);
    for (float& v : w) v = 1.0f + 0.25f * normal(rng);
    std::vector<float> y4(kRows * s, 0.0f), dx4(kRows * s, 0.0f), y2 = y4, dx2 = dx4;
    const Results four = run(view4(x.data(), strides), view4(y4.data(), strides),
                             view4(dy.data(), strides), view4(dx4.data(), strides), w);
    const Results two = run(rows_view(x.data(), s), rows_view(y2.data(), s),
                            rows_view(dy.data(), s), rows_view(dx2.data(), s), w);
    EXPECT_EQ(0, std::memcmp(y4.data(), y2.data(), sizeof(float) * y4.size())) << "y";
    EXPECT_EQ(0, std::memcmp(dx4.data(), dx2.data(), sizeof(float) * dx4.size())) << "dx";
    EXPECT_EQ(four.rstd, two.rstd);
    EXPECT_EQ(four.dw, two.dw);
  }
}

TEST(RmsNormHeadView, RowsAtTwoStridesAreRejectedByName) {
  std::vector<float> buffer(3 * kRows * kD), y(kRows * kD), rstd(kRows), w(kD, 1.0f);
  // q's part of a fused QKV projection [B, T, 3 * heads * D]: heads D apart, tokens 3 * heads * D.
  const std::int64_t fused[4] = {kT * 3 * kHeads * kD, 3 * kHeads * kD, kD, 1};
  // q.transpose(1, 2) of a contiguous [B, T, heads, D] as [B, T, heads, D]-shaped strides of a
  // [B, heads, T, D] buffer: tokens D apart, heads T * D.
  const std::int64_t transposed[4] = {kHeads * kT * kD, kD, kT * kD, 1};
  const TensorView yv = TensorView::contiguous(y.data(), DType::kFloat32, {kB, kT, kHeads, kD});
  for (const auto* strides : {&fused, &transposed}) {
    expect_error(
        [&] {
          tigon::rms_norm_fwd(RmsNormParams{}, view4(buffer.data(), *strides),
                              TensorView::contiguous(w.data(), DType::kFloat32, {kD}), yv,
                              TensorView::contiguous(rstd.data(), DType::kFloat32, {kRows}));
        },
        ErrorCode::kInvalidArgument, "x", "collapse to one row stride", "rms_norm_fwd");
  }
}

}  // namespace
