// Fused linear cross-entropy CPU backend: equals the cross-entropy of the materialized logits
// (same loss bits whatever the chunk size), and its gradients equal the products of that
// cross-entropy gradient with the weight and the hidden states (float64 reference). The float32
// accumulation of a 16-bit dW in place equals a float32 dW rounded once, bit for bit, and the
// in-place narrowing's schedule never overwrites an accumulator before reading it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "host_tensor.h"
#include "math/float_types.h"
#include "ops/fused_linear_cross_entropy_args.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::HostTensor;

TensorView vec(void* p, DType d, std::int64_t n) { return TensorView::contiguous(p, d, {n}); }

struct Result {
  float loss = 0;
  std::vector<float> dx, dw, db;
};

struct Flce {
  std::int64_t n = 11, h = 9, v = 23;
  DType dtype = DType::kBFloat16;
  HostTensor x{DType::kBFloat16, {11, 9}}, w{DType::kBFloat16, {23, 9}};
  std::vector<float> bias;
  std::vector<std::int64_t> y;
  tigon::FusedLinearCrossEntropyParams params;

  explicit Flce(DType d) : dtype(d), x(d, {11, 9}), w(d, {23, 9}) {
    std::mt19937 rng(5);
    x.fill_normal(rng);
    w.fill_normal(rng, 0.0f, 0.5f);
    std::normal_distribution<float> nd;
    for (std::int64_t j = 0; j < v; ++j) bias.push_back(nd(rng));
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) y.push_back(i % 4 == 1 ? -100 : cls(rng));
    params.ce.label_smoothing = 0.1f;
    params.ce.lse_square_scale = 1e-3f;
    params.ce.softcap = 6.0f;
  }

  tigon::FusedLinearCrossEntropyInputs inputs() {
    tigon::FusedLinearCrossEntropyInputs in;
    in.hidden = x.view();
    in.weight = w.view();
    in.bias = vec(bias.data(), DType::kFloat32, v);
    in.target = vec(y.data(), DType::kInt64, n);
    return in;
  }

  Result fused(std::int64_t chunk, DType dw_dtype) {
    params.chunk_rows = chunk;
    Result r;
    HostTensor dx(dtype, {n, h}), dw(dw_dtype, {v, h});
    std::vector<float> db(v);
    tigon::FusedLinearCrossEntropyGrads g{dx.view(), dw.view(), vec(db.data(), DType::kFloat32, v)};
    const auto in = inputs();
    std::vector<unsigned char> ws(tigon::fused_linear_cross_entropy_workspace_size(params, in, g));
    tigon::fused_linear_cross_entropy(params, in, {vec(&r.loss, DType::kFloat32, 1)}, g,
                                      Workspace{ws.data(), ws.size()});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) r.dx.push_back(dx.get(i, k));
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) r.dw.push_back(dw.get(j, k));
    r.db = db;
    return r;
  }

  // Materialized logits (rounded like the fused path), cross_entropy_fwd, float64 products.
  Result unfused() {
    HostTensor logits(dtype, {n, v}), grad(dtype, {n, v});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < v; ++j) {
        float dot = 0;  // lane order differs from the backend: compare with a tolerance
        for (std::int64_t k = 0; k < h; ++k) dot += x.get(i, k) * w.get(j, k);
        logits.set(i, j, dot);
        logits.set(i, j, logits.get(i, j) + bias[j]);
      }
    tigon::CrossEntropyInputs in;
    in.logits = logits.view();
    in.target = vec(y.data(), DType::kInt64, n);
    Result r;
    std::vector<unsigned char> ws(tigon::cross_entropy_fwd_workspace_size(params.ce, in));
    tigon::cross_entropy_fwd(params.ce, in, {vec(&r.loss, DType::kFloat32, 1)}, {}, grad.view(),
                             Workspace{ws.data(), ws.size()});
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) {
        double s = 0;
        for (std::int64_t j = 0; j < v; ++j) s += double(grad.get(i, j)) * w.get(j, k);
        r.dx.push_back(static_cast<float>(s));
      }
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += double(grad.get(i, j)) * x.get(i, k);
        r.dw.push_back(static_cast<float>(s));
      }
    for (std::int64_t j = 0; j < v; ++j) {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) s += grad.get(i, j);
      r.db.push_back(static_cast<float>(s));
    }
    return r;
  }
};

void expect_near(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 0;
  for (float v : b) scale = std::max(scale, double(std::abs(v)));
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * scale) << i;
}

TEST(FusedLinearCrossEntropy, MatchesUnfusedForEveryChunkSize) {
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    Flce f(d);
    const Result want = f.unfused();
    const double tol = d == DType::kFloat32 ? 1e-5 : 2e-2;
    Result first;
    for (std::int64_t chunk : {0, 1, 3, 11}) {
      const Result got = f.fused(chunk, DType::kFloat32);
      EXPECT_NEAR(got.loss, want.loss, 1e-3 * std::abs(want.loss) + 1e-5) << chunk;
      expect_near(got.dx, want.dx, tol);
      expect_near(got.dw, want.dw, tol);
      expect_near(got.db, want.db, tol);
      if (chunk == 0) first = got;
      EXPECT_EQ(got.loss, first.loss) << "chunking must not change the loss";
      EXPECT_EQ(got.dx, first.dx) << "nor dx";
    }
    // dW accumulated in the weight's dtype: one rounding per chunk.
    const Result low = f.fused(3, d);
    expect_near(low.dw, want.dw, d == DType::kFloat32 ? 1e-5 : 4e-2);
  }
}

TEST(FusedLinearCrossEntropy, RejectsGradientsWithReductionNone) {
  Flce f(DType::kFloat32);
  f.params.ce.reduction = Reduction::kNone;
  std::vector<float> loss(f.n);
  HostTensor dx(DType::kFloat32, {f.n, f.h});
  tigon::FusedLinearCrossEntropyGrads g;
  g.hidden = dx.view();
  EXPECT_THROW(tigon::fused_linear_cross_entropy(
                   f.params, f.inputs(), {vec(loss.data(), DType::kFloat32, f.n)}, g, Workspace{}),
               tigon::Error);
}

// A [n, h] x [v, h] problem for the dW accumulation modes (bias-free, several chunks).
struct DweightCase {
  std::int64_t n, h, v, chunk;
  DType dtype;
  HostTensor x, w;
  std::vector<std::int64_t> y;

  DweightCase(std::int64_t n_, std::int64_t h_, std::int64_t v_, std::int64_t chunk_, DType d)
      : n(n_), h(h_), v(v_), chunk(chunk_), dtype(d), x(d, {n_, h_}), w(d, {v_, h_}) {
    std::mt19937 rng(static_cast<unsigned>(7 * v_ + h_));
    x.fill_normal(rng);
    w.fill_normal(rng, 0.0f, 0.5f);
    std::uniform_int_distribution<std::int64_t> cls(0, v - 1);
    for (std::int64_t i = 0; i < n; ++i) y.push_back(i % 5 == 2 ? -100 : cls(rng));
  }

  // dW's bits in `dtype`: accumulated in float32 and rounded once here (fp32_grad), or computed
  // by the op into a dtype tensor with or without fp32_weight_grad_accumulation.
  std::vector<std::uint32_t> dw_bits(bool fp32_grad, bool fp32_accumulation) {
    tigon::FusedLinearCrossEntropyParams p;
    p.chunk_rows = chunk;
    p.fp32_weight_grad_accumulation = fp32_accumulation;
    HostTensor dw(fp32_grad ? DType::kFloat32 : dtype, {v, h});
    tigon::FusedLinearCrossEntropyInputs in;
    in.hidden = x.view();
    in.weight = w.view();
    in.target = vec(y.data(), DType::kInt64, n);
    tigon::FusedLinearCrossEntropyGrads g;
    g.weight = dw.view();
    std::vector<unsigned char> ws(tigon::fused_linear_cross_entropy_workspace_size(p, in, g));
    float loss = 0;
    tigon::fused_linear_cross_entropy(p, in, {vec(&loss, DType::kFloat32, 1)}, g,
                                      Workspace{ws.data(), ws.size()});
    HostTensor rounded(dtype, {v, h});
    std::vector<std::uint32_t> bits;
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) {
        rounded.set(j, k, dw.get(j, k));  // exact unless fp32_grad: the one rounding
        bits.push_back(rounded.bits(j, k));
      }
    return bits;
  }
};

TEST(FusedLinearCrossEntropy, Fp32AccumulatedDweightIsTheFloat32OneRoundedOnce) {
  for (DType d : {DType::kBFloat16, DType::kFloat16}) {
    for (std::int64_t v : {1, 2, 3, 7, 4097}) {
      DweightCase c(13, 33, v, 4, d);
      const auto want = c.dw_bits(true, false);
      EXPECT_EQ(c.dw_bits(false, true), want) << "V=" << v << " " << tigon::dtype_name(d);
      EXPECT_EQ(c.dw_bits(true, true), want) << "no effect on a float32 dW";
      if (v == 4097) EXPECT_NE(c.dw_bits(false, false), want) << "one rounding per chunk differs";
    }
  }
}

TEST(FusedLinearCrossEntropy, Fp32AccumulationNeedsAnAlignedGradient) {
  DweightCase c(4, 3, 5, 2, DType::kBFloat16);
  tigon::FusedLinearCrossEntropyParams p;
  p.fp32_weight_grad_accumulation = true;
  HostTensor dw(DType::kBFloat16, {c.v, c.h});
  tigon::FusedLinearCrossEntropyInputs in;
  in.hidden = c.x.view();
  in.weight = c.w.view();
  in.target = vec(c.y.data(), DType::kInt64, c.n);
  tigon::FusedLinearCrossEntropyGrads g;
  g.weight = dw.view(1);
  try {
    (void)tigon::fused_linear_cross_entropy_workspace_size(p, in, g);
    FAIL() << "expected an error";
  } catch (const tigon::Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4-byte aligned"), std::string::npos) << e.what();
  }
}

// The narrowing's steps, replayed on an ownership map of the storage's floats: every step
// covers the next range below the previous one, reads only floats no write has touched, and
// writes only floats already read (by an earlier step, or by itself for the top block, which
// reads everything first) or past the accumulators; the rounds grow geometrically.
TEST(FusedLinearCrossEntropyDweight, NarrowingScheduleNeverOverwritesAnUnreadAccumulator) {
  for (std::int64_t v : {1, 2, 3, 4, 5, 7, 8, 31, 64, 257, 4097})
    for (std::int64_t h : {1, 2, 3, 7, 64})
      for (std::int64_t top : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{5},
                               std::int64_t{64}, tigon::detail::kNarrowingTopBlock}) {
        const auto s = tigon::detail::dweight_split(v, h);
        ASSERT_GE(s.dst_offset, s.high_floats);
        ASSERT_LE(s.high_floats * 4, v * h * 2) << "the accumulators fit in the gradient";
        const std::int64_t m = s.high_floats, d = s.dst_offset;
        std::vector<char> read(static_cast<std::size_t>(m), 0);
        std::int64_t next_hi = m, rounds = 0;
        auto step = [&](std::int64_t lo, std::int64_t hi, bool top_block) {
          ASSERT_EQ(hi, next_hi);
          ASSERT_LT(lo, hi);
          for (std::int64_t j = lo; j < hi; ++j) {
            ASSERT_FALSE(read[j]);
            read[j] = 1;  // a round's reads all happen before its writes are needed below
          }
          for (std::int64_t j = lo; j < hi; ++j) {
            // T element d + j: bytes [2(d+j), 2(d+j)+2), inside float (d + j) / 2.
            const std::int64_t f = (d + j) / 2;
            if (!top_block) ASSERT_GE(f, hi) << "a round writes none of its own inputs";
            ASSERT_TRUE(f >= m || read[f]) << "v=" << v << " h=" << h << " j=" << j;
          }
          next_hi = lo;
        };
        tigon::detail::for_each_narrowing_step(
            s, top, [&](std::int64_t lo, std::int64_t hi) { step(lo, hi, true); },
            [&](std::int64_t lo, std::int64_t hi) {
              ++rounds;
              step(lo, hi, false);
            });
        EXPECT_EQ(next_hi, 0) << "every accumulator converted";
        EXPECT_EQ(std::count(read.begin(), read.end(), 1), m);
        const double bound = m > 0 ? 2 + std::log2(1.0 + double(m) / double(top)) : 0;
        EXPECT_LE(rounds, bound) << "v=" << v << " h=" << h << " top=" << top;
      }
}

// cpu::finish_dweight at many sizes (uneven rounds with small top blocks): every element is its
// float32 accumulator rounded once, and nothing past the gradient is touched.
TEST(FusedLinearCrossEntropyDweight, NarrowingInPlaceRoundsEveryAccumulatorOnce) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (DType d : {DType::kBFloat16, DType::kFloat16})
    for (std::int64_t v : {1, 2, 3, 7, 10, 33, 1000, 4097})
      for (std::int64_t h : {1, 3, 8, 77})
        for (std::int64_t top : {std::int64_t{1}, std::int64_t{3}, std::int64_t{100},
                                 tigon::detail::kNarrowingTopBlock}) {
          const auto s = tigon::detail::dweight_split(v, h);
          std::vector<float> acc(static_cast<std::size_t>(v * h));
          for (float& a : acc) a = nd(rng);
          std::vector<float> low(acc.begin(), acc.begin() + s.dst_offset);
          const std::size_t bytes = static_cast<std::size_t>(v * h) * 2;
          std::vector<float> storage((bytes + 64) / 4, 12345.0f);  // float-aligned, with a tail
          std::memcpy(storage.data(), acc.data() + s.dst_offset, 4 * s.high_floats);
          const std::vector<float> tail(storage.begin() + bytes / 4 + 1, storage.end());
          tigon::cpu::finish_dweight(s, low.data(), storage.data(), d, top);
          const auto* out = reinterpret_cast<const std::uint16_t*>(storage.data());
          for (std::int64_t i = 0; i < v * h; ++i) {
            const std::uint16_t want = d == DType::kBFloat16
                                           ? tigon::math::float_to_bf16_bits(acc[i])
                                           : tigon::math::float_to_half_bits(acc[i]);
            ASSERT_EQ(out[i], want) << "v=" << v << " h=" << h << " top=" << top << " i=" << i;
          }
          EXPECT_EQ(std::vector<float>(storage.begin() + bytes / 4 + 1, storage.end()), tail);
        }
}

}  // namespace
