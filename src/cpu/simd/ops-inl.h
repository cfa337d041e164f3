// The CPU backend's Highway layer, per target: HwyOps (the Ops of src/math/lanes.h for a Highway
// vector of float, so the formulas of src/math/*-inl.h compile for it) and the loads and stores
// of float and bfloat16 storage. Include it after "hwy/foreach_target.h", like any Highway -inl.h
// header; the kernels then live in tigon::cpu::HWY_NAMESPACE, one copy per target, and are
// called through HWY_DYNAMIC_DISPATCH (the best target this CPU has, chosen at run time).
// Targets built: AVX-512 (AVX3), AVX2 (with FMA, which tigon's host code never contracts into),
// SSE4 and the portable EMU128 fallback (SSSE3 is left out: src/CMakeLists.txt).
#include <cstdint>
#include <type_traits>

#include "math/float_types.h"
#include "math/host_device.h"
#include "tigon/ops/glu.h"

// Per-target include guard (Highway's toggle idiom).
#if defined(TIGON_CPU_SIMD_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TIGON_CPU_SIMD_OPS_INL_H_
#undef TIGON_CPU_SIMD_OPS_INL_H_
#else
#define TIGON_CPU_SIMD_OPS_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tigon::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The formulas, compiled for this target (see src/math/lanes.h).
#include "math/activations-inl.h"
#include "math/glu-inl.h"
#include "math/rope-inl.h"

template <class D>
struct HwyOps {
  using V = hn::Vec<D>;
  static HWY_INLINE V splat(float c) { return hn::Set(D(), c); }
  template <class M>
  static HWY_INLINE V select(M m, V yes, V no) {
    return hn::IfThenElse(m, yes, no);
  }
  static HWY_INLINE V neg(V v) { return hn::Neg(v); }
  static HWY_INLINE auto is_nan(V v) { return hn::IsNaN(v); }
  static HWY_INLINE V clamp(V v, V lo, V hi) { return hn::Min(hn::Max(v, lo), hi); }
  // ScalarOps::ldexp: two exact factors, the second product rounds once. AVX-512's vscalefps
  // computes e * 2^n with that one rounding itself (the same bits, 9 operations fewer).
  static HWY_INLINE V ldexp(V e, V n) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (std::is_same_v<decltype(e.raw), __m512>) {
      return V{_mm512_scalef_ps(e.raw, n.raw)};
    }
#endif
    const V n1 = hn::Trunc(n * splat(0.5f));
    return e * pow2(n1) * pow2(n - n1);
  }
  // math::round_to<T>: bfloat16 rounds to nearest even with the integer sequence of
  // math::float_to_bf16_bits, NaN becomes the quiet NaN the scalar form gives.
  template <typename T>
  static HWY_INLINE V round(V v) {
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else {
      static_assert(std::is_same_v<T, math::BFloat16>, "vector storage: float, bfloat16");
      const hn::RebindToUnsigned<D> du;
      const auto u = hn::BitCast(du, v);
      const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
      const auto r = hn::And(u + hn::Set(du, 0x7fffu) + odd, hn::Set(du, 0xffff0000u));
      return hn::IfThenElse(hn::IsNaN(v), hn::BitCast(D(), hn::Set(du, 0x7fc00000u)),
                            hn::BitCast(D(), r));
    }
  }
  static HWY_INLINE V mul_rn(V x, V m) { return x * m; }  // -ffp-contract=off
  static HWY_INLINE V exp(V v) { return exp_lanes<HwyOps>(v); }
  static HWY_INLINE V tanh(V v) { return tanh_lanes<HwyOps>(v); }

 private:
  // 2^k for an integral k in [-126, 127], built from its bits.
  static HWY_INLINE V pow2(V k) {
    const hn::RebindToSigned<D> di;
    return hn::BitCast(D(), hn::ShiftLeft<23>(hn::ConvertTo(di, k) + hn::Set(di, 127)));
  }
};

// Storage types with a vector path.
template <typename T>
inline constexpr bool kVectorStorage =
    std::is_same_v<T, float> || std::is_same_v<T, math::BFloat16>;

// Lanes(d) values of storage type T at p, as float32 (exact).
template <class D>
HWY_INLINE hn::Vec<D> load(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> load(D d, const math::BFloat16* p) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<std::uint16_t, D> d16;
  const auto bits = hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(p));
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, bits)));
}

// Stores v as T: math::from_float<T>, lane for lane.
template <class D>
HWY_INLINE void store(D d, hn::Vec<D> v, float* p) {
  hn::StoreU(v, d, p);
}
template <class D>
HWY_INLINE void store(D d, hn::Vec<D> v, math::BFloat16* p) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::uint16_t, D> d16;
  const auto u = hn::BitCast(du, v);
  const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  auto r = hn::ShiftRight<16>(u + hn::Set(du, 0x7fffu) + odd);
  r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Set(du, 0x7fc0u), r);
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, reinterpret_cast<std::uint16_t*>(p));
}

}  // namespace tigon::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // TIGON_CPU_SIMD_OPS_INL_H_
