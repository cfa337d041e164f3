// A faster route to the SwiGLU / GeGLU gate h = round_T(act(a)) on the device, bitwise equal to
// math::Glu's exact route (CUDA expf / tanhf, IEEE division) for every input. Device-only (sm_80+);
// the CPU backend and the float32 kernels use math::Glu directly.
//
// Method: compute act(a) in float32 with the hardware approximations ex2.approx.ftz.f32 and
// rcp.approx.ftz.f32 (v), bound |exact float32 value - v| <= B, and round both ends of
// [v - B, v + B] to T, the low end rounded down and the high end up in float32 (add.rm / add.rp).
// Rounding to nearest is monotonic, so if both ends give the same T value, so does every float in
// between, the exact path's value included: that T value is the exact path's h. Otherwise the
// caller falls back to the exact formula for that element (math::Glu::gate); with the bounds
// below that is about 1 element in 3000 (bf16) / 400 (fp16) of normally distributed data.
//
// The bounds. u = 2^-24 (float32 rounding, relative); z = the exponent: exp(z) with z = -a (silu),
// z = -2 * inner (gelu, inner = the float32 tanh argument, computed by the same expression as the
// exact path, so the same bits); e = exp(z), sigma = 1 / (1 + e), and the target real value is
// a * sigma in both cases (0.5 a (1 + tanh(w)) = a / (1 + exp(-2w))). Documented error bounds
// used (CUDA Math API: expf and tanhf 2 ulp, x / y correctly rounded; PTX ISA: rcp.approx 1 ulp,
// ex2.approx 2 ulp), each taken at twice its value for the approximations:
//   * fast:  x = RN(z' * log2e_f) (z' = -a or -2 inner, exact) is within |z| * 1.055e-7 of
//     z * log2(e) (log2e_f's error 1.34e-8 relative plus u), so 2^x is within |z| * 7.31e-8 of e
//     relatively (ln 2 * 1.055e-7); ex2.approx adds 2^-21, or an absolute 2^-126 where it flushes.
//     Only e / (1 + e) = 1 - sigma of that reaches d = RN(1 + e'); with the range check e' <= e^8
//     (z <= 8.0001) the relative error of d is <= 7.31e-8 * 8.0001 + 2^-21 + u <= 1.124e-6.
//     rcp.approx adds 2^-22, the product a * r one more u: |v / (a sigma) - 1| <= 1.42e-6 + h.o.
//   * exact silu: E = expf(-a) within 2^-22 relative, d = RN(1 + E), h = RN(a / d):
//     |h / (a sigma) - 1| <= 2^-22 + 2u + h.o. <= 3.58e-7.
//   * exact gelu: t = tanhf(inner) within 2^-22 absolute (2 ulp of |t| <= 1, ulp <= 2^-23),
//     p = RN(1 + t), h = RN((0.5 a) p): |h - a sigma| <= 2u |a sigma| + |a| 2^-23 (1 + 2u).
//     The absolute term is what grows relative to h in GeGLU's negative tail (1 + t -> 0).
//   So B = c_rel |v| + c_abs |a| + 2^-148 with c_rel = 1.85e-6 (silu: 1.42e-6 + 3.58e-7 with
// |a sigma| <= |v| (1 + 1.5e-6) and margin), c_rel = 1.6e-6 and c_abs = 1.2e-7 (gelu), and 2^-148
// for float32 subnormal results, where the roundings are absolute (<= 2^-150 each). The range
// check e' <= e^8 (silu a >= -8, gelu inner >= -4) also sends NaN and -inf to the exact path; +inf
// a gives B = inf, whose ends round apart.
//
// In the backward the sigmoid s = 1 / (1 + expf(-a)) is computed exactly anyway (silu_backward
// needs it); there v = RN(a * s) and |v - a / d| <= 2u |a / d|, |h - a / d| <= u |a / d|:
// B = 1.8e-7 |v| + 2^-148. A NaN v (a NaN or -inf) passes the test with a NaN h, as the exact
// path's h is then NaN too; h only feeds db = from_float(dy * h), which canonicalizes NaN.
//
// The documented bounds come from testing, not proofs (CUDA Math API). What makes the shipped
// kernels exact is the GPU test, which runs every 16-bit value of a (bf16 and fp16) through the
// library's kernels and a reference kernel with math::Glu, bit for bit
// (tests/cuda/glu_exact_test.cu); h depends on a alone, so that test is exhaustive for h.
#pragma once

#if defined(__CUDACC__)

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "math/float_types.h"
#include "math/glu.h"

namespace tigon::math::fast {

__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Two floats rounded to nearest even to T (BFloat16 or Half) in one cvt, lo in the low half.
template <typename T>
__device__ __forceinline__ std::uint32_t cvt2(float lo, float hi) {
  std::uint32_t w;
  if constexpr (std::is_same_v<T, BFloat16>) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  } else {
    static_assert(std::is_same_v<T, Half>, "16-bit types only");
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  }
  return w;
}

// The float32 values of the T in the low and the high half of w.
template <typename T>
__device__ __forceinline__ float low_value(std::uint32_t w) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return __uint_as_float(w << 16);
  } else {
    return half_bits_to_float(static_cast<std::uint16_t>(w));
  }
}
template <typename T>
__device__ __forceinline__ float high_value(std::uint32_t w) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return __uint_as_float(w & 0xffff0000u);
  } else {
    return half_bits_to_float(static_cast<std::uint16_t>(w >> 16));
  }
}

// Two values v0, v1 with error bounds b0, b1 >= 0, rounded to T in one word (v0 low). The ends of
// [v - b, v + b] are rounded outwards in float32 (add.rm / add.rp), then to T: `word` holds the
// low ends' T values, and `undecided` is zero exactly when each high end rounds to the same T as
// its low end, i.e. when every float32 within the bounds (the exact path's value included) rounds
// to the T in `word`. Two cvt and one xor for two elements.
struct RoundedPair {
  std::uint32_t word;
  std::uint32_t undecided;
};
template <typename T>
__device__ __forceinline__ RoundedPair round_pair(float v0, float b0, float v1, float b1) {
  const std::uint32_t lo = cvt2<T>(__fsub_rd(v0, b0), __fsub_rd(v1, b1));
  const std::uint32_t hi = cvt2<T>(__fadd_ru(v0, b0), __fadd_ru(v1, b1));
  return {lo, lo ^ hi};
}

inline constexpr float kLog2e = 1.44269504088896340736f;  // RN(log2(e))
inline constexpr float kTiny = 0x1p-148f;                 // covers subnormal roundings

template <GluActivation kAct>
struct Bound;
template <>
struct Bound<GluActivation::kSilu> {
  static constexpr float kRel = 1.85e-6f;
  static constexpr float kAbs = 0.0f;
  static constexpr float kMinA = -8.0f;  // z = -a <= 8
};
template <>
struct Bound<GluActivation::kGeluTanh> {
  static constexpr float kRel = 1.6e-6f;
  static constexpr float kAbs = 1.2e-7f;
  // inner(a) = kBeta (a + kKappa a^3) is increasing; inner(-3.25) = -3.82 > -4: z = -2 inner < 8.
  static constexpr float kMinA = -3.25f;
};

// True where the bound is proven (false for NaN and -inf too); +inf gives an infinite bound,
// whose ends round apart.
template <GluActivation kAct>
__device__ __forceinline__ bool in_range(float a) {
  return a >= Bound<kAct>::kMinA;
}

// The exponent's argument z (exp(z), h ~ a / (1 + exp(z))), as math::Activation computes it.
template <GluActivation kAct>
__device__ __forceinline__ float exponent(float a) {
  if constexpr (kAct == GluActivation::kSilu) {
    return -a;
  } else {
    using Act = Activation<GluActivation::kGeluTanh>;
    const float cube = (a * a) * a;  // the exact path's expression: the same float32 bits
    const float inner = Act::kBeta * (a + Act::kKappa * cube);
    return -2.0f * inner;  // exact
  }
}

// The fast act(a) and its error bound (rounded up, so at least the bound derived above).
template <GluActivation kAct>
__device__ __forceinline__ float fast_act(float a, float* bound) {
  const float e = ex2_approx(exponent<kAct>(a) * kLog2e);
  const float v = a * rcp_approx(1.0f + e);
  float b = __fmaf_ru(fabsf(v), Bound<kAct>::kRel, kTiny);
  if constexpr (Bound<kAct>::kAbs != 0.0f) b = __fmaf_ru(fabsf(a), Bound<kAct>::kAbs, b);
  *bound = b;
  return v;
}

// round_T(act(a0)), round_T(act(a1)) in one word where `undecided` is zero and both a are
// in_range; elsewhere the caller uses Glu<kAct, T>::gate.
template <GluActivation kAct, typename T>
__device__ __forceinline__ RoundedPair gate_pair(float a0, float a1) {
  float b0, b1;
  const float v0 = fast_act<kAct>(a0, &b0);
  const float v1 = fast_act<kAct>(a1, &b1);
  return round_pair<T>(v0, b0, v1, b1);
}

// SwiGLU's backward: the gates from the exactly computed sigmoids s = 1 / (1 + expf(-a)). No
// range condition (see the comment at the top).
template <typename T>
__device__ __forceinline__ RoundedPair silu_gate_pair_from_sigmoid(float a0, float s0, float a1,
                                                                   float s1) {
  const float v0 = a0 * s0, v1 = a1 * s1;
  return round_pair<T>(v0, __fmaf_ru(fabsf(v0), 1.8e-7f, kTiny), v1,
                       __fmaf_ru(fabsf(v1), 1.8e-7f, kTiny));
}

}  // namespace tigon::math::fast

#endif  // __CUDACC__
