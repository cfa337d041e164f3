// Fused linear cross-entropy CPU backend: equals the cross-entropy of the materialized logits
// (same loss bits whatever the chunk size), and its gradients equal the products of that
// cross-entropy gradient with the weight and the hidden states (float64 reference). Reduction none
// with a per-row upstream through the backward entry point, the token scale (and
// use_token_scaling) in every reduction, and the backward for upstream 1 equal to the forward's
// gradients bit for bit. The float32
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
#include "test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::Reduction;
using tigon::TensorView;
using tigon::Workspace;
using tigon::testing::HostTensor;

TensorView vec(void* p, DType d, std::int64_t n) { return TensorView::contiguous(p, d, {n}); }

struct Result {
  std::vector<float> loss;  // [N] for reduction none, else one element
  std::vector<float> dx, dw, db;
};

struct Flce {
  std::int64_t n = 11, h = 9, v = 23;
  DType dtype = DType::kBFloat16;
  HostTensor x{DType::kBFloat16, {11, 9}}, w{DType::kBFloat16, {23, 9}};
  std::vector<float> bias;
  std::vector<std::int64_t> y;
  std::vector<float> token_scale;  // empty: none
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

  std::int64_t loss_numel() const { return params.ce.reduction == Reduction::kNone ? n : 1; }

  // Per-row factors in [0, 2) and a negative one (not differentiated, so any sign is fine).
  static std::vector<float> random_rows(std::int64_t count, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 2.0f);
    std::vector<float> r;
    for (std::int64_t i = 0; i < count; ++i) r.push_back(i == 2 ? -0.75f : u(rng));
    return r;
  }

  tigon::FusedLinearCrossEntropyInputs inputs() {
    tigon::FusedLinearCrossEntropyInputs in;
    in.hidden = x.view();
    in.weight = w.view();
    in.bias = vec(bias.data(), DType::kFloat32, v);
    in.target = vec(y.data(), DType::kInt64, n);
    if (!token_scale.empty()) in.token_scale = vec(token_scale.data(), DType::kFloat32, n);
    return in;
  }

  // The forward; with `upstream`, a forward without gradients then the backward for it.
  Result fused(std::int64_t chunk, DType dw_dtype, const std::vector<float>* upstream = nullptr) {
    params.chunk_rows = chunk;
    Result r;
    r.loss.resize(loss_numel());
    HostTensor dx(dtype, {n, h}), dw(dw_dtype, {v, h});
    std::vector<float> db(v);
    tigon::FusedLinearCrossEntropyGrads g{dx.view(), dw.view(), vec(db.data(), DType::kFloat32, v)};
    const auto in = inputs();
    const TensorView loss = vec(r.loss.data(), DType::kFloat32, loss_numel());
    std::vector<unsigned char> ws(tigon::fused_linear_cross_entropy_workspace_size(params, in, g));
    const Workspace wsv{ws.data(), ws.size()};
    if (upstream == nullptr) {
      tigon::fused_linear_cross_entropy(params, in, {loss}, g, wsv);
    } else {
      tigon::fused_linear_cross_entropy(params, in, {loss}, {}, wsv);
      std::vector<float> up = *upstream;
      EXPECT_EQ(ws.size(), tigon::fused_linear_cross_entropy_bwd_workspace_size(params, in, g));
      tigon::fused_linear_cross_entropy_bwd(params, in, vec(up.data(), DType::kFloat32, up.size()),
                                            g, wsv);
    }
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) r.dx.push_back(dx.get(i, k));
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) r.dw.push_back(dw.get(j, k));
    r.db = db;
    return r;
  }

  // Materialized logits (rounded like the fused path), cross_entropy_fwd, float64 products. Each
  // row's gradient is multiplied by t_i * g_i and its loss terms by t_i (the header's token
  // scale, in float64 from the rows' lse), g the upstream (1 without one).
  Result unfused(const std::vector<float>* upstream = nullptr) {
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
    std::vector<float> reduced(loss_numel()), per_row(n), lse(n);
    std::vector<unsigned char> ws(tigon::cross_entropy_fwd_workspace_size(params.ce, in));
    tigon::cross_entropy_fwd(params.ce, in, {vec(reduced.data(), DType::kFloat32, loss_numel())},
                             {}, grad.view(), Workspace{ws.data(), ws.size()});
    tigon::CrossEntropyParams none = params.ce;
    none.reduction = Reduction::kNone;
    tigon::cross_entropy_fwd(none, in, {vec(per_row.data(), DType::kFloat32, n)},
                             vec(lse.data(), DType::kFloat32, n), {},
                             Workspace{ws.data(), ws.size()});
    std::vector<double> t(n, 1.0), f(n, 1.0);
    double count = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (y[i] == params.ce.ignore_index) continue;
      count += 1;
      if (!token_scale.empty()) t[i] = token_scale[i];
      if (params.use_token_scaling) {
        const double cap = params.ce.softcap, c = logits.get(i, y[i]);
        t[i] *= std::exp((cap > 0 ? cap * std::tanh(c / cap) : c) - lse[i]);
      }
      f[i] = t[i];
      if (upstream) f[i] *= (*upstream)[loss_numel() == 1 ? 0 : i];
    }
    // Without class weights the mean's scales a and b are both 1 / n.
    const double a = params.ce.reduction == Reduction::kMean ? 1.0 / count : 1.0;
    double total = 0;
    for (std::int64_t i = 0; i < n; ++i) total += t[i] * per_row[i];
    if (params.ce.reduction == Reduction::kNone) {
      for (std::int64_t i = 0; i < n; ++i) r.loss.push_back(static_cast<float>(t[i] * per_row[i]));
    } else {
      r.loss.push_back(static_cast<float>(a * total));
    }
    auto g = [&](std::int64_t i, std::int64_t j) { return f[i] * grad.get(i, j); };
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < h; ++k) {
        double s = 0;
        for (std::int64_t j = 0; j < v; ++j) s += g(i, j) * w.get(j, k);
        r.dx.push_back(static_cast<float>(s));
      }
    for (std::int64_t j = 0; j < v; ++j)
      for (std::int64_t k = 0; k < h; ++k) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += g(i, j) * x.get(i, k);
        r.dw.push_back(static_cast<float>(s));
      }
    for (std::int64_t j = 0; j < v; ++j) {
      double s = 0;
      for (std::int64_t i = 0; i < n; ++i) s += g(i, j);
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

void expect_grads_near(const Result& got, const Result& want, DType d) {
  const double tol = d == DType::kFloat32 ? 1e-5 : 2e-2;
  expect_near(got.dx, want.dx, tol);
  expect_near(got.dw, want.dw, tol);
  expect_near(got.db, want.db, tol);
}

TEST(FusedLinearCrossEntropy, MatchesUnfusedForEveryChunkSize) {
  for (DType d : {DType::kFloat32, DType::kBFloat16}) {
    Flce f(d);
    const Result want = f.unfused();
    Result first;
    for (std::int64_t chunk : {0, 1, 3, 11}) {
      const Result got = f.fused(chunk, DType::kFloat32);
      EXPECT_NEAR(got.loss[0], want.loss[0], 1e-3 * std::abs(want.loss[0]) + 1e-5) << chunk;
      expect_grads_near(got, want, d);
      if (chunk == 0) first = got;
      EXPECT_EQ(got.loss, first.loss) << "chunking must not change the loss";
      EXPECT_EQ(got.dx, first.dx) << "nor dx";
    }
    // dW accumulated in the weight's dtype: one rounding per chunk.
    const Result low = f.fused(3, d);
    expect_near(low.dw, want.dw, d == DType::kFloat32 ? 1e-5 : 4e-2);
  }
}

// reduction none: loss.backward(g) for a random per-row g (negative and zero entries included),
// through the backward entry point, for every chunk size (boundaries inside and between rows'
// chunks, ignored rows), with and without a token scale and use_token_scaling.
TEST(FusedLinearCrossEntropy, ReductionNoneBackwardWithAPerRowUpstream) {
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (int scaled = 0; scaled < 3; ++scaled) {
      Flce f(d);
      f.params.ce.reduction = Reduction::kNone;
      if (scaled >= 1) f.token_scale = Flce::random_rows(f.n, 11);
      f.params.use_token_scaling = scaled == 2;
      std::vector<float> g = Flce::random_rows(f.n, 3);
      g[5] = 0.0f;
      const Result want = f.unfused(&g);
      Result first;
      for (std::int64_t chunk : {0, 1, 3, 4, 11}) {
        const Result got = f.fused(chunk, DType::kFloat32, &g);
        expect_near(got.loss, want.loss, 1e-3);
        expect_grads_near(got, want, d);
        if (chunk == 0) first = got;
        EXPECT_EQ(got.loss, first.loss) << chunk;
        EXPECT_EQ(got.dx, first.dx) << "a row's dx does not depend on the chunking";
      }
    }
}

// The token scale in every reduction: loss terms and gradient rows times t_i, the mean's
// denominator unchanged (the forward's gradients and the backward's for a scalar upstream).
TEST(FusedLinearCrossEntropy, TokenScaleInEveryReduction) {
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean})
      for (bool by_prob : {false, true}) {
        Flce f(d);
        f.params.ce.reduction = red;
        f.token_scale = Flce::random_rows(f.n, 17);
        f.params.use_token_scaling = by_prob;
        const Result want = f.unfused();
        for (std::int64_t chunk : {0, 3}) {
          const Result got = f.fused(chunk, DType::kFloat32);
          expect_near(got.loss, want.loss, 1e-3);
          expect_grads_near(got, want, d);
        }
        if (red == Reduction::kNone) continue;
        std::vector<float> g{-1.5f};
        const Result want_bwd = f.unfused(&g);
        expect_grads_near(f.fused(3, DType::kFloat32, &g), want_bwd, d);
      }
}

// use_token_scaling alone: t_i = p_y, detached.
TEST(FusedLinearCrossEntropy, UseTokenScalingIsTheTargetProbability) {
  Flce f(DType::kFloat32);
  f.params.use_token_scaling = true;
  const Result want = f.unfused();
  const Result got = f.fused(4, DType::kFloat32);
  expect_near(got.loss, want.loss, 1e-5);
  expect_grads_near(got, want, DType::kFloat32);
}

// The backward for upstream 1 is the forward's gradients, bit for bit on the CPU: the same rows
// with the same rounding points (reduction none: the forward's gradients are those of the sum).
TEST(FusedLinearCrossEntropy, BackwardForUpstreamOneIsTheForwardsGradients) {
  for (DType d : {DType::kFloat32, DType::kBFloat16})
    for (Reduction red : {Reduction::kNone, Reduction::kSum, Reduction::kMean}) {
      Flce f(d);
      f.params.ce.reduction = red;
      f.token_scale = Flce::random_rows(f.n, 23);
      const std::vector<float> ones(static_cast<std::size_t>(f.loss_numel()), 1.0f);
      const Result fwd = f.fused(3, DType::kFloat32);
      const Result bwd = f.fused(3, DType::kFloat32, &ones);
      EXPECT_EQ(fwd.loss, bwd.loss);
      EXPECT_EQ(fwd.dx, bwd.dx) << tigon::reduction_name(red);
      EXPECT_EQ(fwd.dw, bwd.dw) << tigon::reduction_name(red);
      EXPECT_EQ(fwd.db, bwd.db) << tigon::reduction_name(red);
    }
}

TEST(FusedLinearCrossEntropyErrors, NameTheArgument) {
  using tigon::ErrorCode;
  using tigon::testing::expect_error;
  Flce f(DType::kFloat32);
  f.params.ce.reduction = Reduction::kNone;
  std::vector<float> loss(f.n), up(f.n + 1), scale(f.n + 1);
  HostTensor dx(DType::kFloat32, {f.n, f.h});
  tigon::FusedLinearCrossEntropyGrads g;
  g.hidden = dx.view();
  std::vector<unsigned char> ws(1 << 20);
  const Workspace wsv{ws.data(), ws.size()};
  auto in = f.inputs();
  expect_error(
      [&] {
        tigon::fused_linear_cross_entropy_bwd(f.params, in,
                                              vec(up.data(), DType::kFloat32, f.n - 1), g, wsv);
      },
      ErrorCode::kInvalidArgument, "grad_loss", "11 elements");
  in.token_scale = vec(scale.data(), DType::kFloat32, f.n + 1);
  expect_error(
      [&] {
        tigon::fused_linear_cross_entropy(f.params, in, {vec(loss.data(), DType::kFloat32, f.n)}, g,
                                          wsv);
      },
      ErrorCode::kInvalidArgument, "token_scale", "shape [11]");
  in.token_scale = vec(scale.data(), DType::kFloat16, f.n);
  expect_error(
      [&] {
        tigon::fused_linear_cross_entropy_bwd(f.params, in, vec(up.data(), DType::kFloat32, f.n), g,
                                              wsv);
      },
      ErrorCode::kTypeError, "token_scale", "float32");
  f.params.ce.reduction = Reduction::kMean;
  in.token_scale = {};
  expect_error(
      [&] {
        tigon::fused_linear_cross_entropy_bwd(f.params, in, vec(up.data(), DType::kFloat32, f.n), g,
                                              wsv);
      },
      ErrorCode::kInvalidArgument, "grad_loss", "1 elements");
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
