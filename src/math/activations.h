// exp and tanh for the activations (SwiGLU, GeGLU).
//
// On the device they are CUDA's expf/tanhf: those are what PyTorch's CUDA silu/gelu kernels call,
// so a CUDA run gives the bits of HF's eager module on the GPU (the GLU translation units are
// compiled with nvcc's default FMA contraction, as PyTorch's are). On the host they are tigon's
// own float32 exp/tanh below, built from correctly rounded +, -, *, / only: correctly rounded in
// most cases and within about one unit in the last place otherwise, independent of the libm.
// The two backends therefore agree within an ulp or two of float32 (docs/ops/glu.md).
#pragma once

#include <cmath>
#include <cstdint>

#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

// 2^k for k in [-126, 127], built from its bits.
TIGON_HD float exp2_int(int k) { return bits_float(static_cast<std::uint32_t>(k + 127) << 23); }

// exp(x) = 2^n * exp(r), r = x - n * ln2 in [-ln2/2, ln2/2] (Cody-Waite: ln2_hi has 15
// significant bits, so n * ln2_hi and x - n * ln2_hi are exact). exp(r) = 1 + r + q with the
// rounding error of 1 + r and of r itself carried separately, which keeps the result within
// about 0.6 ulp.
TIGON_HD float exp_f32(float x) {
  if (x != x) return x;           // NaN
  x = x > 89.0f ? 89.0f : x;      // exp(89) overflows to +inf below, as it should
  x = x < -104.0f ? -104.0f : x;  // exp(-104) underflows to 0 below
  constexpr float kLog2e = 1.44269502162933349609375f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.428606765330187045e-06f;
  const float n = (x * kLog2e + kRound) - kRound;
  const float r_hi = x - n * kLn2Hi;  // exact
  const float c = n * kLn2Lo;
  const float r = r_hi - c;
  // TwoSum: the exact rounding error of r_hi - c.
  const float bb = r - r_hi;
  const float r_lo = (r_hi - (r - bb)) + (-c - bb);
  // q = exp(r) - 1 - r, degree-8 Taylor (truncation < 0.05 ulp for |r| <= ln2 / 2).
  float p = 1.0f / 40320.0f;
  p = 1.0f / 5040.0f + r * p;
  p = 1.0f / 720.0f + r * p;
  p = 1.0f / 120.0f + r * p;
  p = 1.0f / 24.0f + r * p;
  p = 1.0f / 6.0f + r * p;
  p = 0.5f + r * p;
  const float q = (r * r) * p;
  const float hi = 1.0f + r;
  const float hi_err = (1.0f - hi) + r;  // exact (Fast2Sum, |1| >= |r|)
  const float e = hi + (hi_err + (r_lo + r_lo * r + q));
  // Two factors so that n = 128 (results near FLT_MAX) and n < -126 stay representable.
  const int k = static_cast<int>(n);
  const int k1 = k / 2;
  return e * exp2_int(k1) * exp2_int(k - k1);
}

// tanh(x): an odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above, +-1 from 9 on (where
// tanh rounds to 1). NaN stays NaN.
TIGON_HD float tanh_f32(float x) {
  if (x != x) return x;
  const float y = x < 0.0f ? -x : x;
  float t;
  if (y < 0.625f) {
    // tanh(y) = y + y^3 * P(y^2), P fitted for relative error < 2e-10 on [0, 0.625].
    const float s = y * y;
    float p = 0.0021489840000867844f;
    p = -0.008184662088751793f + s * p;
    p = 0.021703999489545822f + s * p;
    p = -0.05394745245575905f + s * p;
    p = 0.13333211839199066f + s * p;
    p = -0.3333333134651184f + s * p;
    t = y + y * (s * p);
  } else if (y < 9.0f) {
    t = 1.0f - 2.0f / (exp_f32(y + y) + 1.0f);
  } else {
    t = 1.0f;
  }
  return x < 0.0f ? -t : t;
}

// What the activations call: CUDA's functions on the device, the ones above on the host.
TIGON_HD float act_exp(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return exp_f32(x);
#endif
}

TIGON_HD float act_tanh(float x) {
#if defined(__CUDA_ARCH__)
  return ::tanhf(x);
#else
  return tanh_f32(x);
#endif
}

}  // namespace tigon::math
