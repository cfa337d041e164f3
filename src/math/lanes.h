// The value types the formulas are written over. Each formula that the CPU backend vectorizes
// (exp, tanh, the GLU activations, RoPE) is a template over Ops, written once in a
// src/math/*-inl.h file:
//   - Ops::V: float here (ScalarOps: g++ on the host, nvcc on the device), or a Highway vector of
//     float on the CPU (src/cpu/simd/ops-inl.h). +, -, *, / and < are C++ operators on V (IEEE,
//     correctly rounded on every lane; never contracted on the host, -ffp-contract=off).
//   - Ops::splat(c), select(mask, yes, no), neg(v), is_nan(v): what is not an operator.
//   - Ops::clamp(v, lo, hi): v limited to [lo, hi] (a NaN lane: any value, the caller selects).
//   - Ops::ldexp(e, n): e * 2^n rounded once (correctly), for e in [0.5, 2] and an integral n in
//     [-150, 128]: overflow gives +inf, subnormal results round once.
//   - Ops::round<T>(v): the float32 value v takes once stored as T (round_to<T>).
//   - Ops::mul_rn(x, m): x * m, never fused into a later add (also on the device).
//   - Ops::exp, Ops::tanh: the activations' exp and tanh (act_exp / act_tanh here).
// The -inl.h files have no include guard: they are included once inside tigon::math (below, for
// the scalar forms every backend uses) and once per Highway target inside that target's
// namespace (src/cpu/simd/), because Highway's code for a target must be defined under that
// target's attributes. One text, so a vector lane computes the bits of the scalar form.
#pragma once

#include <cstdint>

#include "math/float_types.h"
#include "math/host_device.h"

// What the -inl.h formulas are declared with: TIGON_HD, and always inlined on the host too (a
// vector formula left as a call costs the loop its overlap between iterations).
#if defined(__CUDACC__)
#define TIGON_LANES TIGON_HD
#else
#define TIGON_LANES inline __attribute__((always_inline))
#endif

namespace tigon::math {

// 2^k for k in [-126, 127], built from its bits.
TIGON_HD float exp2_int(int k) { return bits_float(static_cast<std::uint32_t>(k + 127) << 23); }

struct ScalarOps {
  using V = float;
  TIGON_HD static float splat(float c) { return c; }
  TIGON_HD static float select(bool m, float yes, float no) { return m ? yes : no; }
  TIGON_HD static float neg(float v) { return -v; }
  TIGON_HD static bool is_nan(float v) { return v != v; }
  TIGON_HD static float clamp(float v, float lo, float hi) {
    return v != v ? lo : (v < lo ? lo : (hi < v ? hi : v));  // no NaN reaches an int conversion
  }
  // Two exact factors 2^(n/2) and 2^(n - n/2), so that n = 128 (results near FLT_MAX) and
  // n < -126 stay representable: e * 2^(n/2) is exact, the second product rounds once.
  TIGON_HD static float ldexp(float e, float n) {
    const int k = static_cast<int>(n);
    const int k1 = k / 2;
    return e * exp2_int(k1) * exp2_int(k - k1);
  }
  template <typename T>
  TIGON_HD static float round(float v) {
    return round_to<T>(v);
  }
  TIGON_HD static float mul_rn(float x, float m) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(x, m);
#else
    return x * m;  // host code: -ffp-contract=off
#endif
  }
  TIGON_HD static float exp(float v);  // math/activations.h
  TIGON_HD static float tanh(float v);
};

}  // namespace tigon::math
