// The CPU backend's vector path (Highway, the best ISA of this CPU) against the scalar form of the
// same formulas (src/math/*-inl.h over ScalarOps): bit for bit, over a sweep of float32 bit
// patterns that covers every exponent, both signs, zeros, subnormals, infinities and NaN.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "host_tensor.h"
#include "hwy/targets.h"
#include "math/glu.h"
#include "math/rope.h"
#include "tigon/tigon.h"

namespace {

using tigon::DType;
using tigon::GluActivation;
using tigon::testing::HostTensor;
namespace math = tigon::math;

// Every 16411th bit pattern: about 2^18 values, in rows of `width` (not a multiple of any vector
// width, so each row ends in the scalar tail too).
std::vector<float> sweep_values() {
  std::vector<float> v;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 16411) {
    v.push_back(math::bits_float(static_cast<std::uint32_t>(u)));
  }
  return v;
}

// The same bits, or both NaN (a float32 NaN's payload depends on operand order, which the
// compiler may commute; 16-bit stores canonicalize NaN).
bool same_value(float got, float want) {
  return (got != got && want != want) || math::float_bits(got) == math::float_bits(want);
}

template <typename T>
DType dtype_of() {
  return std::is_same_v<T, float> ? DType::kFloat32 : DType::kBFloat16;
}

// Runs check once per Highway target this CPU supports (the dispatch picks each in turn).
template <typename F>
void for_each_target(F&& check) {
  const std::int64_t supported = hwy::SupportedTargets();
  for (std::int64_t rest = supported; rest != 0; rest &= rest - 1) {
    const std::int64_t target = rest & -rest;
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    check();
  }
  hwy::SetSupportedTargetsForTest(0);
}

template <GluActivation kAct, typename T>
void check_glu_once(bool scaled) {
  const std::vector<float> values = sweep_values();
  constexpr std::int64_t kWidth = 1021;
  const std::int64_t rows = static_cast<std::int64_t>(values.size()) / kWidth;
  const DType dt = dtype_of<T>();
  HostTensor a(dt, {rows, kWidth}), b(dt, {rows, kWidth}), dy(dt, {rows, kWidth});
  HostTensor y(dt, {rows, kWidth}), da(dt, {rows, kWidth}), db(dt, {rows, kWidth});
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < kWidth; ++c) {
      const std::int64_t i = r * kWidth + c;
      a.set(r, c, values[i]);
      b.set(r, c, values[(i * 7 + 3) % values.size()]);
      dy.set(r, c, 0.25f * static_cast<float>((c % 9) - 4));
    }
  }
  const tigon::GluMultipliers m{scaled ? 0.75f : 1.0f, scaled ? 1.5f : 1.0f};
  tigon::glu_fwd(kAct, a.view(), b.view(), y.view(), m);
  tigon::glu_bwd(kAct, dy.view(), a.view(), b.view(), da.view(), db.view(), m);
  using Glu = math::Glu<kAct, T>;
  std::int64_t mismatches = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < kWidth; ++c) {
      const float va = a.get(r, c), vb = b.get(r, c), vdy = dy.get(r, c);
      const float gm = static_cast<float>(m.gate), dm = static_cast<float>(m.down);
      const T wy = scaled ? Glu::forward(va, vb, gm, dm) : Glu::forward(va, vb);
      const auto g = scaled ? Glu::backward(vdy, va, vb, gm, dm) : Glu::backward(vdy, va, vb);
      const bool same = same_value(y.get(r, c), math::to_float(wy)) &&
                        same_value(da.get(r, c), math::to_float(g.da)) &&
                        same_value(db.get(r, c), math::to_float(g.db));
      if (!same && ++mismatches <= 5) {
        ADD_FAILURE() << "a=" << va << " b=" << vb << " dy=" << vdy << " y " << y.get(r, c)
                      << " vs " << math::to_float(wy) << ", da " << da.get(r, c) << " vs "
                      << math::to_float(g.da) << ", db " << db.get(r, c) << " vs "
                      << math::to_float(g.db);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

template <GluActivation kAct, typename T>
void check_glu(bool scaled) {
  for_each_target([&] { check_glu_once<kAct, T>(scaled); });
}

TEST(SimdLanes, SwiGluFloat) { check_glu<GluActivation::kSilu, float>(false); }
TEST(SimdLanes, SwiGluBFloat16) { check_glu<GluActivation::kSilu, math::BFloat16>(false); }
TEST(SimdLanes, GeGluFloat) { check_glu<GluActivation::kGeluTanh, float>(false); }
TEST(SimdLanes, GeGluBFloat16) { check_glu<GluActivation::kGeluTanh, math::BFloat16>(false); }
TEST(SimdLanes, ScaledSwiGluBFloat16) { check_glu<GluActivation::kSilu, math::BFloat16>(true); }
TEST(SimdLanes, ScaledGeGluFloat) { check_glu<GluActivation::kGeluTanh, float>(true); }

}  // namespace
