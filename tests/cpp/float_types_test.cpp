// Host conversions between float32 and bfloat16 / float16, checked against an independent
// reference: decode each 16-bit pattern with ldexp in double, and round by searching the ordered
// patterns for the nearest value (ties to the even pattern). Every pattern, every midpoint and its
// neighbours, and a million random floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "math/float_types.h"

namespace {

using tigon::math::bf16_bits_to_float;
using tigon::math::bits_float;
using tigon::math::float_bits;
using tigon::math::float_to_bf16_bits;
using tigon::math::float_to_half_bits;
using tigon::math::half_bits_to_float;

struct Format {
  int mantissa_bits;
  int exponent_bias;
  std::uint16_t exponent_mask;  // all-ones exponent field (inf/NaN)
};
constexpr Format kBf16{7, 127, 0xff};
constexpr Format kHalf{10, 15, 0x1f};

// Value of a 16-bit pattern, from its fields.
double decode(Format f, std::uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> f.mantissa_bits) & f.exponent_mask;
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  double v;
  if (exponent == f.exponent_mask) {
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    v = std::ldexp(mantissa, 1 - f.exponent_bias - f.mantissa_bits);
  } else {
    v = std::ldexp(mantissa + (1 << f.mantissa_bits), exponent - f.exponent_bias - f.mantissa_bits);
  }
  return sign ? -v : v;
}

// Nearest pattern to x, ties to even; beyond the largest finite value the "next" value is the
// power of two one ulp above it, so overflow rounds exactly as IEEE 754 says.
std::uint16_t reference_round(Format f, float x) {
  const std::uint16_t inf_bits = static_cast<std::uint16_t>(f.exponent_mask << f.mantissa_bits);
  if (std::isnan(x)) return 0xffff;  // marker: caller checks NaN-ness
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  auto value = [&](std::uint32_t p) {
    if (p == inf_bits) return std::ldexp(1.0, (f.exponent_mask - 1) - f.exponent_bias + 1);
    return decode(f, static_cast<std::uint16_t>(p));
  };
  if (std::isinf(x)) return sign | inf_bits;
  std::uint32_t lo = 0, hi = inf_bits;  // largest p with value(p) <= a, by bisection
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    (value(mid) <= a ? lo : hi) = mid;
  }
  if (value(hi) <= a) lo = hi;
  if (lo == inf_bits) return sign | inf_bits;
  const double below = a - value(lo), above = value(lo + 1) - a;
  const std::uint32_t p = below < above ? lo : above < below ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return static_cast<std::uint16_t>(sign | p);
}

void expect_round(Format f, float x, std::uint16_t got) {
  const std::uint16_t want = reference_round(f, x);
  if (want == 0xffff) {
    EXPECT_TRUE(std::isnan(decode(f, got))) << "NaN input must stay NaN, got 0x" << std::hex << got;
  } else {
    ASSERT_EQ(got, want) << "x = " << x << " (0x" << std::hex << float_bits(x) << ")";
  }
}

TEST(Bf16, WideningIsExactForAllPatterns) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const double want = decode(kBf16, static_cast<std::uint16_t>(b));
    const float got = bf16_bits_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "pattern " << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "pattern " << b;
    }
  }
}

TEST(Half, WideningIsExactForAllPatterns) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const double want = decode(kHalf, static_cast<std::uint16_t>(b));
    const float got = half_bits_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "pattern " << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "pattern " << b;
    }
  }
}

// Each representable value, the midpoints to its neighbour, and one float ulp either side.
template <typename Narrow>
void check_patterns_and_midpoints(Format f, Narrow narrow) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const double v = decode(f, static_cast<std::uint16_t>(b));
    if (std::isnan(v)) {
      expect_round(f, static_cast<float>(v), narrow(static_cast<float>(v)));
      continue;
    }
    const float x = static_cast<float>(v);
    ASSERT_EQ(narrow(x), b) << "representable value must round-trip";
    if (std::isinf(v)) continue;
    const double next = decode(f, static_cast<std::uint16_t>(b + 1));
    if (std::isnan(next) || (b & 0x7fff) == 0x7fff) continue;
    const double mid_d = std::isinf(next)
                             ? v + (v - decode(f, static_cast<std::uint16_t>(b - 1))) / 2
                             : (v + next) / 2;
    const float mid = static_cast<float>(mid_d);  // exact: 16-bit formats have <= 11 bits
    for (float probe : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, mid * 2.0f)}) {
      expect_round(f, probe, narrow(probe));
    }
  }
}

TEST(Bf16, NarrowingRoundsToNearestEvenOnEveryPatternAndMidpoint) {
  check_patterns_and_midpoints(kBf16, float_to_bf16_bits);
}

TEST(Half, NarrowingRoundsToNearestEvenOnEveryPatternAndMidpoint) {
  check_patterns_and_midpoints(kHalf, float_to_half_bits);
}

TEST(FloatTypes, NarrowingMatchesReferenceOnRandomFloats) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_int_distribution<std::uint32_t> mantissa(0, (1u << 23) - 1);
  std::uniform_int_distribution<std::uint32_t> near_half_range(100, 145);  // exponents around fp16
  for (int i = 0; i < 1000000; ++i) {
    const float x = i % 2 ? bits_float(any_bits(rng))
                          : bits_float((any_bits(rng) & 0x80000000u) |
                                       (near_half_range(rng) << 23) | mantissa(rng));
    expect_round(kBf16, x, float_to_bf16_bits(x));
    expect_round(kHalf, x, float_to_half_bits(x));
  }
}

TEST(Half, AgreesWithTheCompilersFloat16) {
#if defined(__FLT16_MAX__)
  std::mt19937 rng(99);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    const float x = bits_float(any_bits(rng));
    const _Float16 h = static_cast<_Float16>(x);
    std::uint16_t want;
    std::memcpy(&want, &h, 2);
    if (std::isnan(x)) continue;
    ASSERT_EQ(float_to_half_bits(x), want) << x;
  }
#else
  GTEST_SKIP() << "this compiler has no _Float16";
#endif
}

TEST(FloatTypes, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16_bits(inf), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-inf), 0xff80);
  EXPECT_EQ(float_to_half_bits(inf), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // tie rounds to the even pattern: infinity
  EXPECT_EQ(float_to_half_bits(5.9604645e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half_bits(2.9802322e-08f), 0x0000);  // half of it: tie to even (zero)
  EXPECT_EQ(float_to_bf16_bits(3.3895314e38f), 0x7f7f);   // largest finite bf16
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(-std::nanf("")))));
}

}  // namespace
