// exp and tanh for the activations (SwiGLU, GeGLU).
//
// On the device they are CUDA's expf/tanhf: those are what PyTorch's CUDA silu/gelu kernels call,
// so a CUDA run gives the bits of HF's eager module on the GPU (the GLU translation units are
// compiled with nvcc's default FMA contraction, as PyTorch's are). On the host they are tigon's
// own float32 exp/tanh (src/math/activations-inl.h), built from correctly rounded +, -, *, / only:
// correctly rounded in most cases and within about one unit in the last place otherwise,
// independent of the libm, and the same bits in the CPU backend's vector lanes (any ISA) as in
// its scalar code. The two backends therefore agree within an ulp or two of float32
// (docs/ops/glu.md).
#pragma once

#include <cmath>
#include <cstdint>

#include "math/float_types.h"
#include "math/host_device.h"
#include "math/lanes.h"

namespace tigon::math {

#include "math/activations-inl.h"

TIGON_HD float exp_f32(float x) { return exp_lanes<ScalarOps>(x); }
TIGON_HD float tanh_f32(float x) { return tanh_lanes<ScalarOps>(x); }

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

TIGON_HD float ScalarOps::exp(float v) { return act_exp(v); }
TIGON_HD float ScalarOps::tanh(float v) { return act_tanh(v); }

}  // namespace tigon::math
