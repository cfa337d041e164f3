// A faster route to the SwiGLU / GeGLU gate h = round_T(act(a)) on the device, bitwise equal to
// math::Glu's exact route (CUDA expf / tanhf, IEEE division) for every input. Device-only (sm_80+,
// T = BFloat16 or Half); the CPU backend and the float32 kernels use math::Glu as it is.
//
// Method: compute act(a) in float32 with ex2.approx.ftz.f32 and rcp.approx.ftz.f32 (value v),
// bound |exact path's float32 value - v| <= B, and round both ends of [v - B, v + B] to T, the low
// end rounded down and the high end up in float32 first (add.rm / add.rp). Rounding to nearest is
// monotonic: if both ends give the same T value, so does every float in between, the exact path's
// value included, and that T value is the exact path's h. Otherwise (the two ends straddle a
// rounding boundary of T) the caller takes the exact formula, math::Glu::gate.
//
// The bounds. u = 2^-24 (a float32 rounding, relative). Both activations are a / (1 + exp(z)):
// silu z = -a; gelu_tanh 0.5 a (1 + tanh(w)) = a / (1 + exp(-2w)), z = -2w with w = the float32
// tanh argument ("inner"), computed by the exact path's own expression, so both paths see the same
// w and the same real target a * sigma, sigma = 1 / (1 + e), e = exp(z). Error bounds used: CUDA
// Math API, expf and tanhf 2 ulp, x / y correctly rounded, exp2f 2 ulp (exp2f is ex2.approx plus
// subnormal handling: taken as ex2.approx.ftz's bound for normal results); PTX ISA,
// rcp.approx.f32 1 ulp. For a normal result, 1 ulp <= 2^-23 relative.
//   * fast: x = RN(z * log2e_f) (z itself exact: -a, or -2w) is within |z| 1.0526e-7 of
//     z log2(e) (log2e_f is 1.93e-8 off, plus u |x|), so 2^x is within 7.30e-8 |z| of e,
//     relatively (ln 2 * 1.0526e-7, the exponential's curvature negligible below |z| = 128);
//     ex2.approx adds 2^-22 (or an absolute 2^-126 where ftz flushes, which 1 + e' absorbs).
//     At most e / (1 + e) <= 1 of that reaches d' = RN(1 + e'), which adds u; rcp.approx adds
//     2^-23 and v = RN(a r') one more u: |v / (a sigma) - 1| <= 4.77e-7 + 7.30e-8 |z| (+ O(u^2)).
//   * exact silu: E = expf(-a) within 2^-22 of e, relatively; d = RN(1 + E), h = RN(a / d):
//     |h / (a sigma) - 1| <= 2^-22 + 2u + O(u^2) <= 3.58e-7.
//   * exact gelu: t = tanhf(w) within 2^-23 absolutely (2 ulp, and floats of magnitude < 1 are at
//     most 2^-24 apart), p = RN(1 + t), h = RN((0.5 a) p): |h - a sigma| <= 2u |a sigma| +
//     2^-24 |a| (1 + 2u). This absolute term is what grows relative to h in GeGLU's negative
//     tail (1 + t -> 0).
//   B = (c_rel + 7.32e-8 |z|) |v| + c_abs |a| + 2^-148, every operation rounded up, with silu
// c_rel = 8.4e-7 > 4.77e-7 + 3.58e-7, gelu c_rel = 6.0e-7 > 4.77e-7 + 2u, c_abs = 6.0e-8 >
// 2^-24 (1 + 2u); the excess of each constant (and of 7.32e-8) covers the O(u^2) terms and
// |a sigma| <= |v| (1 + 1e-5) for |z| <= 128 (beyond, e' is 0 or inf); 2^-148 covers float32
// subnormal results, where each rounding is absolute (<= 2^-150). No range condition: where the
// derivation does not hold the check fails by itself. d' > 2^126 (z > 87.3) or e' = inf give r' = 0
// (ftz), v = +-0 and an interval across zero, whose ends round to -0 and +0; +inf gives B = inf and
// ends that round apart; NaN and -inf give a NaN v, hence a NaN product, which the kernels send to
// the exact path (pack_ops.cuh).
//
// SwiGLU's backward computes s = 1 / (1 + expf(-a)) exactly anyway (silu_backward needs it);
// there v = RN(a s): |v - a / d| <= 2u |a / d| (s = RN(1 / d), then the product), |h - a / d| <=
// u |a / d|: B = 1.8e-7 |v| + 2^-148, for every a. A NaN v (a NaN, or -inf: -inf * 0) passes
// the test with a NaN h; the exact h is then NaN too (NaN, -inf / inf), and h only feeds
// db = from_float(dy * h), which canonicalizes NaN.
//
// The CUDA Math API says its bounds come from extensive, not exhaustive, testing. What makes the
// kernels exact is tests/cuda/glu_cuda_test.cpp, which runs every 16-bit value of a (bf16 and
// fp16) through the library's kernels and the exact reference kernel (glu_exact_reference.cu),
// bit for bit; h depends on a alone, so for h that test is exhaustive.
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

// B = (kRel + kArg |z|) |v| + kAbs |a| + kTiny (see the comment at the top).
inline constexpr float kArg = 7.32e-8f;
template <GluActivation kAct>
struct Bound;
template <>
struct Bound<GluActivation::kSilu> {
  static constexpr float kRel = 8.4e-7f;
  static constexpr float kAbs = 0.0f;
};
template <>
struct Bound<GluActivation::kGeluTanh> {
  static constexpr float kRel = 6.0e-7f;
  static constexpr float kAbs = 6.0e-8f;
};

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

// The fast act(a) and its error bound (every step rounded up, so at least the bound above).
template <GluActivation kAct>
__device__ __forceinline__ float fast_act(float a, float* bound) {
  const float z = exponent<kAct>(a);
  const float e = ex2_approx(z * kLog2e);
  const float v = a * rcp_approx(1.0f + e);
  const float c = __fmaf_ru(fabsf(z), kArg, Bound<kAct>::kRel);
  float b = __fmaf_ru(fabsf(v), c, kTiny);
  if constexpr (Bound<kAct>::kAbs != 0.0f) b = __fmaf_ru(fabsf(a), Bound<kAct>::kAbs, b);
  *bound = b;
  return v;
}

// round_T(act(a0)), round_T(act(a1)) in one word where `undecided` is zero; elsewhere the
// caller uses Glu<kAct, T>::gate. A NaN value (a NaN or -inf) can pass: the caller sends NaN
// products to the exact path.
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
