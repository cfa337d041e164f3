// RoPE CPU backend: the product for CPU training and the oracle CUDA is tested against. Rows
// (one head of one token) run in parallel; each channel pair (i, i + h) is read before either
// channel is written, so an output may be its input (in place). With unit channel strides and
// float32 / bfloat16 storage, the pairs run on Highway vectors of the best ISA this CPU has
// (chosen at run time; src/cpu/simd/ops-inl.h), the last h mod Lanes pairs and every other case
// on the scalar form of the same formulas (src/math/rope-inl.h): the same bits either way.
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "cpu/parallel.h"
#include "math/rope.h"
#include "ops/rope_args.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rope.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "cpu/simd/ops-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tigon::cpu::HWY_NAMESPACE {
namespace {

using detail::RopeArgs;
using detail::RopeTensor;
using math::from_float;
using math::to_float;

// kUnit: every last-dimension stride is 1, so the channel loops are plain (vector) loops.
template <typename Math, bool kBackward, bool kUnit>
void rotate(const RopeArgs& a, const RopeTensor& t) {
  using T = typename Math::X;
  using C = typename Math::Cos;
  using P = typename Math::P;
  using In = std::conditional_t<kBackward, P, T>;
  using Out = std::conditional_t<kBackward, T, P>;
  using Lanes = RopeLanes<T, C>;
  const hn::ScalableTag<float> d;
  using Ops = HwyOps<decltype(d)>;
  constexpr bool kVector = kUnit && kVectorStorage<T> && kVectorStorage<C>;
  const auto* in = static_cast<const In*>(t.in);
  auto* out = static_cast<Out*>(t.out);
  const auto* cos = static_cast<const C*>(a.cos);
  const auto* sin = static_cast<const C*>(a.sin);
  const std::int64_t h = a.rotary_dim / 2;
  const std::int64_t n1 = t.sizes[1], n2 = t.sizes[2];
  const std::int64_t xs = kUnit ? 1 : t.in_strides[3];
  const std::int64_t ys = kUnit ? 1 : t.out_strides[3];
  const std::int64_t cs = kUnit ? 1 : a.cos_strides[3];
  const std::int64_t ss = kUnit ? 1 : a.sin_strides[3];

  parallel_for(t.rows(), t.dim, [&](std::int64_t row) {
    const std::int64_t i2 = row % n2;
    const std::int64_t i1 = (row / n2) % n1;
    const std::int64_t i0 = row / n2 / n1;
    const In* x = in + i0 * t.in_strides[0] + i1 * t.in_strides[1] + i2 * t.in_strides[2];
    Out* y = out + i0 * t.out_strides[0] + i1 * t.out_strides[1] + i2 * t.out_strides[2];
    const C* c = cos + i0 * a.cos_strides[0] + i1 * a.cos_strides[1] + i2 * a.cos_strides[2];
    const C* s = sin + i0 * a.sin_strides[0] + i1 * a.sin_strides[1] + i2 * a.sin_strides[2];
    std::int64_t j = 0;
    if constexpr (kVector) {
      const std::int64_t n = static_cast<std::int64_t>(hn::Lanes(d));
      for (; j + n <= h; j += n) {
        const auto x1 = load(d, x + j), x2 = load(d, x + j + h);
        const auto c1 = load(d, c + j), c2 = load(d, c + j + h);
        const auto s1 = load(d, s + j), s2 = load(d, s + j + h);
        if constexpr (kBackward) {
          store(d, Lanes::template grad_first<Ops>(x1, x2, c1, s2), y + j);
          store(d, Lanes::template grad_second<Ops>(x1, x2, c2, s1), y + j + h);
        } else {
          store(d, Lanes::template first<Ops>(x1, x2, c1, s1), y + j);
          store(d, Lanes::template second<Ops>(x1, x2, c2, s2), y + j + h);
        }
      }
    }
    for (; j < h; ++j) {
      const float x1 = to_float(x[j * xs]), x2 = to_float(x[(j + h) * xs]);
      const float c1 = to_float(c[j * cs]), c2 = to_float(c[(j + h) * cs]);
      const float s1 = to_float(s[j * ss]), s2 = to_float(s[(j + h) * ss]);
      float y1, y2;
      if constexpr (kBackward) {
        y1 = Math::grad_first(x1, x2, c1, s2);
        y2 = Math::grad_second(x1, x2, c2, s1);
      } else {
        y1 = Math::first(x1, x2, c1, s1);
        y2 = Math::second(x1, x2, c2, s2);
      }
      y[j * ys] = from_float<Out>(y1);
      y[(j + h) * ys] = from_float<Out>(y2);
    }
    if (!t.write_pass) return;
    for (std::int64_t k = 2 * h; k < t.dim; ++k) {
      const float v = to_float(x[k * xs]);
      y[k * ys] = from_float<Out>(kBackward ? Math::grad_pass(v) : v);
    }
  });
}

bool unit_last_strides(const RopeArgs& a, const RopeTensor& t) {
  return t.in_strides[3] == 1 && t.out_strides[3] == 1 && a.cos_strides[3] == 1 &&
         a.sin_strides[3] == 1;
}

}  // namespace

void Rope(const detail::RopeArgs& a) {
  detail::dispatch_dtype(a.x_dtype, [&](auto t_tag) {
    detail::dispatch_dtype(a.cos_dtype, [&](auto c_tag) {
      using Math = math::Rope<typename decltype(t_tag)::type, typename decltype(c_tag)::type>;
      for (int i = 0; i < a.count; ++i) {
        const RopeTensor& t = a.tensors[i];
        detail::dispatch_bool(a.backward, [&](auto backward) {
          detail::dispatch_bool(unit_last_strides(a, t), [&](auto unit) {
            rotate<Math, decltype(backward)::value, decltype(unit)::value>(a, t);
          });
        });
      }
    });
  });
}

}  // namespace tigon::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tigon::cpu {

HWY_EXPORT(Rope);

void rope(const detail::RopeArgs& a) { HWY_DYNAMIC_DISPATCH(Rope)(a); }

}  // namespace tigon::cpu
#endif
