// RoPE CPU backend against a float64 oracle of the documented formula (include/tigon/ops/rope.h),
// bit for bit, for every (activation, cos) dtype pair, forward and backward, GQA, partial rotary,
// odd head dims, broadcast and batched cos/sin, HF's transposed layout, padded and strided views,
// in place and without k; plus the closeness of the result to the exact rotation.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpp/strided_tensor.h"
#include "cpp/test_support.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::TensorView;
using tigon::testing::round_to;
using tigon::testing::StridedTensor;

std::uint32_t bits_of(DType dtype, double v) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case DType::kFloat32: return tigon::math::float_bits(f);
    case DType::kFloat16: return tigon::math::float_to_half_bits(f);
    case DType::kBFloat16: return tigon::math::float_to_bf16_bits(f);
  }
  return 0;
}

double epsilon_of(DType dtype) {
  return dtype == DType::kFloat32 ? 0x1p-24 : dtype == DType::kFloat16 ? 0x1p-11 : 0x1p-8;
}

enum class Layout { kContiguous, kHeadsInner, kPadded, kStrided, kMisaligned };

StridedTensor make(DType dtype, std::array<std::int64_t, 4> sizes, Layout layout) {
  switch (layout) {
    case Layout::kContiguous: return StridedTensor(dtype, sizes);
    case Layout::kHeadsInner: return StridedTensor(dtype, sizes, {0, 2, 1, 3});  // HF's q
    case Layout::kPadded: return StridedTensor(dtype, sizes, {0, 2, 1, 3}, 8);
    case Layout::kStrided: return StridedTensor(dtype, sizes, {0, 1, 2, 3}, 0, 2);
    case Layout::kMisaligned: return StridedTensor(dtype, sizes, {0, 1, 2, 3}, 0, 1, 1);
  }
  return StridedTensor(dtype, sizes);
}

struct Case {
  std::string name;
  DType t = DType::kBFloat16;  // q, k, dx
  DType c = DType::kBFloat16;  // cos, sin
  std::int64_t batch = 2, hq = 3, hk = 1, seq = 5, dim = 16, rotary = 16;
  bool cos_batched = true;  // cos [B, 1, S, R], else [1, 1, S, R]
  Layout in_layout = Layout::kHeadsInner;
  Layout out_layout = Layout::kContiguous;
  bool in_place = false;
  bool with_k = true;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  const DType dtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  for (DType t : dtypes) {
    for (DType c : dtypes) {
      Case base;
      base.t = t;
      base.c = c;
      base.name = std::string(tigon::dtype_name(t)) + "_cos_" + tigon::dtype_name(c);
      all.push_back(base);
      Case partial = base;
      partial.name += "_partial_odd_dim";
      partial.dim = 13;
      partial.rotary = 8;
      partial.cos_batched = false;
      partial.in_layout = Layout::kPadded;
      partial.out_layout = Layout::kStrided;
      all.push_back(partial);
      if (tigon::promote_types(t, c) == t) {
        Case in_place = base;
        in_place.name += "_in_place";
        in_place.in_place = true;
        all.push_back(in_place);
        Case in_place_partial = partial;
        in_place_partial.name += "_in_place";
        in_place_partial.in_place = true;
        all.push_back(in_place_partial);
      }
    }
  }
  Case big;
  big.name = "llama_like_gqa_d128";
  big.hq = 8;
  big.hk = 2;
  big.seq = 7;
  big.dim = big.rotary = 128;
  all.push_back(big);
  Case q_only;
  q_only.name = "q_only_misaligned";
  q_only.with_k = false;
  q_only.in_layout = Layout::kMisaligned;
  q_only.out_layout = Layout::kMisaligned;
  all.push_back(q_only);
  Case minimal;
  minimal.name = "rotary_2_of_3";
  minimal.dim = 3;
  minimal.rotary = 2;
  minimal.t = minimal.c = DType::kFloat32;
  all.push_back(minimal);
  return all;
}

// cos / sin: random values (not HF's duplicated halves, so every index is tested as read), with
// zeros sprinkled in for signed-zero cases.
StridedTensor make_table(const Case& c, std::mt19937& rng) {
  StridedTensor table(c.c, {c.cos_batched ? c.batch : 1, 1, c.seq, c.rotary});
  table.fill_normal(rng);
  table.set(0, 0, 0, 0, 0.0f);
  return table;
}

// The oracle: the header's formula in float64 with its explicit roundings. Element (a, b, s, j).
struct Oracle {
  const Case& c;
  const StridedTensor& cos;
  const StridedTensor& sin;
  DType p() const { return tigon::rope_output_dtype(c.t, c.c); }
  float cs(const StridedTensor& tab, std::int64_t a, std::int64_t s, std::int64_t j) const {
    return tab.get(c.cos_batched ? a : 0, 0, s, j);
  }

  double forward(const StridedTensor& x, std::int64_t a, std::int64_t b, std::int64_t s,
                 std::int64_t j) const {
    const std::int64_t h = c.rotary / 2;
    const DType pt = p();
    if (j >= c.rotary) return x.get(a, b, s, j);
    const double xv = x.get(a, b, s, j);
    const double partner = j < h ? -static_cast<double>(x.get(a, b, s, j + h))
                                 : static_cast<double>(x.get(a, b, s, j - h));
    return round_to(pt,
                    round_to(pt, xv * cs(cos, a, s, j)) + round_to(pt, partner * cs(sin, a, s, j)));
  }

  double backward(const StridedTensor& dy, std::int64_t a, std::int64_t b, std::int64_t s,
                  std::int64_t j) const {
    const std::int64_t h = c.rotary / 2;
    const DType pt = p(), t = c.t;
    if (j >= c.rotary) return round_to(t, dy.get(a, b, s, j)) + 0.0;
    auto branch = [&](std::int64_t k, const StridedTensor& tab) {
      return round_to(t, round_to(pt, static_cast<double>(dy.get(a, b, s, k)) * cs(tab, a, s, k)));
    };
    const double own = branch(j, cos);
    return j < h ? round_to(t, own + branch(j + h, sin)) + 0.0
                 : round_to(t, own - branch(j - h, sin)) + 0.0;
  }

  // The exact rotation (forward) or its transpose (backward), unrounded.
  double exact(const StridedTensor& x, std::int64_t a, std::int64_t b, std::int64_t s,
               std::int64_t j, bool backward, double* magnitude) const {
    const std::int64_t h = c.rotary / 2;
    if (j >= c.rotary) {
      *magnitude = std::fabs(x.get(a, b, s, j));
      return x.get(a, b, s, j);
    }
    const double own = static_cast<double>(x.get(a, b, s, j)) * cs(cos, a, s, j);
    double other;
    if (!backward) {
      other = (j < h ? -static_cast<double>(x.get(a, b, s, j + h)) : x.get(a, b, s, j - h)) *
              cs(sin, a, s, j);
    } else {
      other = j < h ? static_cast<double>(x.get(a, b, s, j + h)) * cs(sin, a, s, j + h)
                    : -static_cast<double>(x.get(a, b, s, j - h)) * cs(sin, a, s, j - h);
    }
    *magnitude = std::fabs(own) + std::fabs(other);
    return own + other;
  }
};

class RopeCpu : public ::testing::TestWithParam<Case> {};

void check(const Case& c, const Oracle& o, const StridedTensor& in, const StridedTensor& out,
           bool backward, const char* what) {
  const DType out_dtype = out.dtype();
  // Rounding to P (forward) or T (backward) up to three times; T after P adds one more.
  const double tolerance = 4 * epsilon_of(out_dtype) + 2 * epsilon_of(o.p());
  std::int64_t mismatches = 0;
  in.for_each([&](auto a, auto b, auto s, auto j) {
    const double expected = backward ? o.backward(in, a, b, s, j) : o.forward(in, a, b, s, j);
    if (out.bits(a, b, s, j) != bits_of(out_dtype, expected) && ++mismatches <= 5) {
      ADD_FAILURE() << what << " (" << a << ", " << b << ", " << s << ", " << j << "): got "
                    << out.get(a, b, s, j) << ", oracle " << expected;
    }
    double magnitude = 0.0;
    const double exact = o.exact(in, a, b, s, j, backward, &magnitude);
    EXPECT_LE(std::fabs(out.get(a, b, s, j) - exact), tolerance * magnitude + 1e-30)
        << what << " far from the exact rotation";
  });
  EXPECT_EQ(mismatches, 0) << what << ": elements differing from the oracle (" << c.name << ")";
}

TEST_P(RopeCpu, MatchesFloat64OracleBitwise) {
  const Case& c = GetParam();
  std::mt19937 rng(1234);
  const DType p = tigon::rope_output_dtype(c.t, c.c);
  StridedTensor cos = make_table(c, rng), sin = make_table(c, rng);
  const Oracle oracle{c, cos, sin};

  // Forward.
  StridedTensor q = make(c.t, {c.batch, c.hq, c.seq, c.dim}, c.in_layout);
  StridedTensor k = make(c.t, {c.batch, c.hk, c.seq, c.dim}, c.in_layout);
  q.fill_normal(rng);
  k.fill_normal(rng);
  q.set(0, 0, 0, 0, -0.0f);
  const StridedTensor q_in = q, k_in = k;
  StridedTensor yq = make(p, q.sizes(), c.out_layout), yk = make(p, k.sizes(), c.out_layout);
  StridedTensor& yq_ref = c.in_place ? q : yq;
  StridedTensor& yk_ref = c.in_place ? k : yk;
  tigon::rope_fwd(q.view(), c.with_k ? k.view() : TensorView{}, cos.view(), sin.view(),
                  yq_ref.view(), c.with_k ? yk_ref.view() : TensorView{});
  check(c, oracle, q_in, yq_ref, false, "y_q");
  if (c.with_k) check(c, oracle, k_in, yk_ref, false, "y_k");

  // Backward, with zeros in dy (signed-zero results).
  StridedTensor dyq = make(p, q.sizes(), c.in_layout), dyk = make(p, k.sizes(), c.in_layout);
  dyq.fill_normal(rng);
  dyk.fill_normal(rng);
  for (std::int64_t j = 0; j < c.dim; ++j) dyq.set(0, 0, 1 % c.seq, j, j % 2 ? 0.0f : -0.0f);
  const StridedTensor dyq_in = dyq, dyk_in = dyk;
  StridedTensor dxq = make(c.t, q.sizes(), c.out_layout), dxk = make(c.t, k.sizes(), c.out_layout);
  StridedTensor& dxq_ref = c.in_place ? dyq : dxq;
  StridedTensor& dxk_ref = c.in_place ? dyk : dxk;
  tigon::rope_bwd(dyq.view(), c.with_k ? dyk.view() : TensorView{}, cos.view(), sin.view(),
                  dxq_ref.view(), c.with_k ? dxk_ref.view() : TensorView{});
  check(c, oracle, dyq_in, dxq_ref, true, "dx_q");
  if (c.with_k) check(c, oracle, dyk_in, dxk_ref, true, "dx_k");
  for (std::int64_t j = 0; j < c.dim; ++j) {
    EXPECT_EQ(dxq_ref.get(0, 0, 1 % c.seq, j), 0.0f);
    EXPECT_FALSE(std::signbit(dxq_ref.get(0, 0, 1 % c.seq, j))) << "zero gradient must be +0";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RopeCpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The in-place forward leaves channels >= R untouched (it does not even rewrite them).
TEST(RopeCpuInPlace, PassThroughChannelsUntouched) {
  std::mt19937 rng(7);
  StridedTensor q(DType::kBFloat16, {1, 2, 3, 10});
  StridedTensor cos(DType::kBFloat16, {1, 1, 3, 4}), sin(DType::kBFloat16, {1, 1, 3, 4});
  q.fill_normal(rng);
  cos.fill_normal(rng);
  sin.fill_normal(rng);
  const StridedTensor before = q;
  tigon::rope_fwd(q.view(), {}, cos.view(), sin.view(), q.view(), {});
  q.for_each([&](auto a, auto b, auto s, auto j) {
    if (j >= 4) EXPECT_EQ(q.bits(a, b, s, j), before.bits(a, b, s, j));
  });
}

// HF's cos/sin ([f, f] halves): the forward then backward is the identity up to rounding.
TEST(RopeCpuInverse, BackwardUndoesForwardInFloat32) {
  std::mt19937 rng(11);
  const std::int64_t s = 9, d = 64;
  StridedTensor q(DType::kFloat32, {2, 4, s, d}, {0, 2, 1, 3});
  StridedTensor cos(DType::kFloat32, {1, 1, s, d}), sin(DType::kFloat32, {1, 1, s, d});
  q.fill_normal(rng);
  for (std::int64_t t = 0; t < s; ++t) {
    for (std::int64_t j = 0; j < d / 2; ++j) {
      const double angle = t * std::pow(10000.0, -2.0 * j / d);
      for (std::int64_t half : {std::int64_t{0}, d / 2}) {
        cos.set(0, 0, t, j + half, static_cast<float>(std::cos(angle)));
        sin.set(0, 0, t, j + half, static_cast<float>(std::sin(angle)));
      }
    }
  }
  StridedTensor y(DType::kFloat32, q.sizes()), back(DType::kFloat32, q.sizes());
  tigon::rope_fwd(q.view(), {}, cos.view(), sin.view(), y.view(), {});
  tigon::rope_bwd(y.view(), {}, cos.view(), sin.view(), back.view(), {});
  q.for_each([&](auto a, auto b, auto t, auto j) {
    EXPECT_NEAR(back.get(a, b, t, j), q.get(a, b, t, j), 1e-5);
  });
}

TEST(RopeCpuEmpty, NoRowsIsANoOp) {
  StridedTensor q(DType::kBFloat16, {2, 0, 3, 8}), y(DType::kBFloat16, {2, 0, 3, 8});
  StridedTensor cos(DType::kBFloat16, {1, 1, 3, 8});
  tigon::rope_fwd(q.view(), {}, cos.view(), cos.view(), y.view(), {});
  tigon::rope_bwd(q.view(), {}, cos.view(), cos.view(), y.view(), {});
}

}  // namespace
