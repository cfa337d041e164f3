// SwiGLU / GeGLU CPU backend: the product for CPU training and the oracle CUDA is tested against.
// Elementwise; work is split into fixed chunks of a row (rows and chunks in parallel), so results
// never depend on the thread count. float32 and bfloat16 run the formulas of src/math/glu-inl.h on
// Highway vectors of the best ISA this CPU has (chosen at run time; src/cpu/simd/ops-inl.h), a
// row's last Lanes - 1 elements and float16 the scalar form of the same formulas: every element
// gets the same bits on any ISA, vector or scalar.
#include <algorithm>
#include <cstdint>

#include "core/dispatch.h"
#include "cpu/parallel.h"
#include "math/glu.h"
#include "ops/glu_args.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/glu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "cpu/simd/ops-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tigon::cpu::HWY_NAMESPACE {
namespace {

using detail::GluBwdArgs;
using detail::GluFwdArgs;
using math::to_float;

constexpr std::int64_t kChunk = 4096;  // elements of a row per task

// Calls body(row, begin, end) over [0, rows) x [0, width) in chunks, in parallel.
template <typename Body>
void for_each_chunk(std::int64_t rows, std::int64_t width, Body&& body) {
  const std::int64_t chunks_per_row = (width + kChunk - 1) / kChunk;
  parallel_for(rows * chunks_per_row, std::min(width, kChunk) * 8, [&](std::int64_t task) {
    const std::int64_t row = task / chunks_per_row;
    const std::int64_t begin = (task % chunks_per_row) * kChunk;
    body(row, begin, std::min(width, begin + kChunk));
  });
}

template <GluActivation kAct, typename T, bool kScaled>
void forward(const GluFwdArgs& p) {
  using Math = math::Glu<kAct, T>;
  using Lanes = GluLanes<kAct, T>;
  const hn::ScalableTag<float> d;
  using Ops = HwyOps<decltype(d)>;
  const float gm = p.gate_multiplier, dm = p.down_multiplier;
  for_each_chunk(p.rows, p.width, [&](std::int64_t row, std::int64_t begin, std::int64_t end) {
    const T* a = static_cast<const T*>(p.a) + row * p.a_row_stride;
    const T* b = static_cast<const T*>(p.b) + row * p.b_row_stride;
    T* y = static_cast<T*>(p.y) + row * p.y_row_stride;
    std::int64_t j = begin;
    if constexpr (kVectorStorage<T>) {
      const auto vgm = Ops::splat(gm), vdm = Ops::splat(dm);
      const std::int64_t n = static_cast<std::int64_t>(hn::Lanes(d));
      for (; j + n <= end; j += n) {
        const auto va = load(d, a + j), vb = load(d, b + j);
        store(d,
              kScaled ? Lanes::template forward<Ops>(va, vb, vgm, vdm)
                      : Lanes::template forward<Ops>(va, vb),
              y + j);
      }
    }
    for (; j < end; ++j) {
      y[j] = kScaled ? Math::forward(to_float(a[j]), to_float(b[j]), gm, dm)
                     : Math::forward(to_float(a[j]), to_float(b[j]));
    }
  });
}

template <GluActivation kAct, typename T, bool kScaled>
void backward(const GluBwdArgs& p) {
  using Math = math::Glu<kAct, T>;
  using Lanes = GluLanes<kAct, T>;
  const hn::ScalableTag<float> d;
  using Ops = HwyOps<decltype(d)>;
  const float gm = p.gate_multiplier, dm = p.down_multiplier;
  for_each_chunk(p.rows, p.width, [&](std::int64_t row, std::int64_t begin, std::int64_t end) {
    const T* dy = static_cast<const T*>(p.dy) + row * p.dy_row_stride;
    const T* a = static_cast<const T*>(p.a) + row * p.a_row_stride;
    const T* b = static_cast<const T*>(p.b) + row * p.b_row_stride;
    T* da = static_cast<T*>(p.da) + row * p.da_row_stride;
    T* db = static_cast<T*>(p.db) + row * p.db_row_stride;
    // Both inputs are read before either output is written: da may be a, db may be b.
    std::int64_t j = begin;
    if constexpr (kVectorStorage<T>) {
      const auto vgm = Ops::splat(gm), vdm = Ops::splat(dm);
      const std::int64_t n = static_cast<std::int64_t>(hn::Lanes(d));
      for (; j + n <= end; j += n) {
        const auto vdy = load(d, dy + j), va = load(d, a + j), vb = load(d, b + j);
        hn::Vec<decltype(d)> vda, vdb;
        if constexpr (kScaled) {
          Lanes::template backward<Ops>(vdy, va, vb, vgm, vdm, vda, vdb);
        } else {
          Lanes::template backward<Ops>(vdy, va, vb, vda, vdb);
        }
        store(d, vda, da + j);
        store(d, vdb, db + j);
      }
    }
    for (; j < end; ++j) {
      const auto g = kScaled
                         ? Math::backward(to_float(dy[j]), to_float(a[j]), to_float(b[j]), gm, dm)
                         : Math::backward(to_float(dy[j]), to_float(a[j]), to_float(b[j]));
      da[j] = g.da;
      db[j] = g.db;
    }
  });
}

template <typename Args, typename F>
void dispatch(const Args& a, F&& f) {
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    detail::dispatch_bool(a.scaled(), [&](auto scaled) {
      constexpr bool kScaled = decltype(scaled)::value;
      if (a.activation == GluActivation::kGeluTanh) {
        f.template operator()<GluActivation::kGeluTanh, T, kScaled>();
      } else {
        f.template operator()<GluActivation::kSilu, T, kScaled>();
      }
    });
  });
}

}  // namespace

void GluFwd(const detail::GluFwdArgs& a) {
  dispatch(a,
           [&]<GluActivation kAct, typename T, bool kScaled>() { forward<kAct, T, kScaled>(a); });
}

void GluBwd(const detail::GluBwdArgs& a) {
  dispatch(a,
           [&]<GluActivation kAct, typename T, bool kScaled>() { backward<kAct, T, kScaled>(a); });
}

}  // namespace tigon::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tigon::cpu {

HWY_EXPORT(GluFwd);
HWY_EXPORT(GluBwd);

void glu_fwd(const detail::GluFwdArgs& a) { HWY_DYNAMIC_DISPATCH(GluFwd)(a); }
void glu_bwd(const detail::GluBwdArgs& a) { HWY_DYNAMIC_DISPATCH(GluBwd)(a); }

}  // namespace tigon::cpu
#endif
