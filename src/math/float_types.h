// The 16-bit storage types and exact conversions to and from float32, shared by every backend.
// float -> 16 bit rounds to nearest even, keeps infinities, produces subnormals, and maps NaN to a
// quiet NaN (0x7FC0 / 0x7E00 with the input's sign for fp16, as PyTorch's CPU conversions do for
// bf16). The 16 bit -> float direction is exact.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "math/host_device.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace tigon::math {

struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

TIGON_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TIGON_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// bfloat16 is the top half of a float32, so widening is a shift.
TIGON_HD float bf16_bits_to_float(std::uint16_t b) { return bits_float(std::uint32_t{b} << 16); }

#if defined(__CUDA_ARCH__)
// float -> 16 bit on the device through the packed conversion (cvt.rn.{bf16x2,f16x2}.f32, SASS
// F2FP.*.PACK_AB) with an unused second lane: the scalar cvt.rn.{bf16,f16}.f32 compiles to F2F,
// which issues on the SM's narrow transcendental unit (XU, 16 lanes a clock). Two of them an
// element kept the RMSNorm forward's XU pipe 36% busy on an H100 (ncu, 2026-12-05), 2% with the
// packed form, as in Inductor's kernel. Same round-to-nearest-even result.
__device__ __forceinline__ __half device_float_to_half(float f) {
  return __low2half(__floats2half2_rn(f, 0.0f));
}
#if __CUDA_ARCH__ >= 800  // the bf16 conversions' callers below use it from sm_80 on
__device__ __forceinline__ __nv_bfloat16 device_float_to_bf16(float f) {
  return __low2bfloat16(__floats2bfloat162_rn(f, 0.0f));
}
#endif
#endif

TIGON_HD std::uint16_t float_to_bf16_bits(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // One packed conversion instead of the integer sequence below: the same round-to-nearest-even
  // result. NaN is mapped to the host's quiet NaN, so both backends store the same bits.
  const std::uint16_t rounded = __bfloat16_as_ushort(device_float_to_bf16(f));
  return f != f ? std::uint16_t{0x7fc0u} : rounded;
#else
  const std::uint32_t u = float_bits(f);
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. Overflow carries
  // into the exponent and correctly produces infinity. A select, not a branch, for NaN keeps the
  // CPU loops vectorizable.
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<std::uint16_t>(is_nan ? 0x7fc0u : rounded);
#endif
}

TIGON_HD float half_bits_to_float(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
#endif
}

TIGON_HD std::uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  // The hardware NaN is 0x7fff; map it to the host's quiet NaN with the input's sign.
  const std::uint16_t rounded = __half_as_ushort(device_float_to_half(f));
  return f != f ? static_cast<std::uint16_t>(((float_bits(f) >> 16) & 0x8000u) | 0x7e00u) : rounded;
#else
  std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (u >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536: inf
  if (u < 0x38800000u) {
    // Result is subnormal or zero. Adding 0.5f aligns the value so that the float adder's own
    // round-to-nearest-even lands the half mantissa in the low bits of the sum.
    const float magic = 0.5f;
    const float sum = bits_float(u) + magic;
    return static_cast<std::uint16_t>(sign | (float_bits(sum) - float_bits(magic)));
  }
  // Normal: rebias the exponent (127 -> 15), round to nearest even on the 13 dropped bits.
  // A carry out of the mantissa bumps the exponent, and from 65520 upwards reaches infinity.
  const std::uint32_t mantissa_odd = (u >> 13) & 1u;
  u += 0xc8000fffu + mantissa_odd;  // (15 - 127) << 23 + 0xfff, modulo 2^32
  return static_cast<std::uint16_t>(sign | (u >> 13));
#endif
}

// Uniform accessors used by the kernels: load as float, store from float.
TIGON_HD float to_float(float v) { return v; }
TIGON_HD float to_float(Half v) { return half_bits_to_float(v.bits); }
TIGON_HD float to_float(BFloat16 v) { return bf16_bits_to_float(v.bits); }

template <typename T>
TIGON_HD T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, Half>) {
    return Half{float_to_half_bits(v)};
  } else {
    static_assert(std::is_same_v<T, BFloat16>, "unsupported storage type");
    return BFloat16{float_to_bf16_bits(v)};
  }
}

// The float32 value v takes once stored as T (round to nearest even).
template <typename T>
TIGON_HD float round_to(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    // An intermediate rounding needs no NaN canonicalization (a NaN stays a NaN, and every store
    // canonicalizes), so on the device it is one cvt and one shift.
    return __bfloat162float(device_float_to_bf16(v));
#endif
  } else {
    return to_float(from_float<T>(v));
  }
}

// PyTorch's promotion of two floating types: equal types stay, anything else is float32.
template <typename A, typename B>
using Promote = std::conditional_t<std::is_same_v<A, B>, A, float>;

}  // namespace tigon::math
