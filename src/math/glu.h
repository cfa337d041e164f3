// SwiGLU / GeGLU formulas, per element, written once for the CPU and CUDA backends. The cast
// order is the spec (include/tigon/ops/glu.h, docs/ops/glu.md); it follows PyTorch's own float32
// silu / gelu(tanh) kernels and autograd through Hugging Face's eager MLP.
#pragma once

#include "math/activations.h"
#include "math/float_types.h"
#include "math/host_device.h"
#include "tigon/ops/glu.h"

namespace tigon::math {

template <GluActivation kAct>
struct Activation;

template <>
struct Activation<GluActivation::kSilu> {
  TIGON_HD static float forward(float a) { return a / (1.0f + act_exp(-a)); }
  // PyTorch's silu_backward: dy * sigmoid * (1 + x * (1 - sigmoid)).
  TIGON_HD static float backward(float g, float a) {
    const float s = 1.0f / (1.0f + act_exp(-a));
    return (g * s) * (1.0f + a * (1.0f - s));
  }
};

template <>
struct Activation<GluActivation::kGeluTanh> {
  static constexpr float kBeta = 0.7978845608028654f;  // float32(sqrt(2) * (2 / sqrt(pi)) / 2)
  static constexpr float kKappa = 0.044715f;
  TIGON_HD static float forward(float a) {
    const float cube = (a * a) * a;
    const float inner = kBeta * (a + kKappa * cube);
    return (0.5f * a) * (1.0f + act_tanh(inner));
  }
  // PyTorch's gelu_backward (approximate="tanh"), term for term.
  TIGON_HD static float backward(float g, float a) {
    const float a_sq = a * a;
    const float cube = a * a_sq;
    const float inner = kBeta * (a + kKappa * cube);
    const float t = act_tanh(inner);
    const float left = 0.5f * a;
    const float right = 1.0f + t;
    const float left_derivative = 0.5f * right;
    const float tanh_derivative = 1.0f - t * t;
    constexpr float kThreeKappa = 3.0f * kKappa;  // one float32 rounding, as 3.0f * kKappa
    const float inner_derivative = kBeta * (1.0f + kThreeKappa * a_sq);
    const float right_derivative = (left * tanh_derivative) * inner_derivative;
    return g * (left_derivative + right_derivative);
  }
};

// T: storage type of every tensor (float, Half, BFloat16).
template <GluActivation kAct, typename T>
struct Glu {
  using Act = Activation<kAct>;

  // h = act(a) rounded to T, as HF's act_fn(gate) returns it.
  TIGON_HD static float gate(float a) { return round_to<T>(Act::forward(a)); }

  TIGON_HD static T forward(float a, float b) { return from_float<T>(gate(a) * b); }

  struct Grads {
    T da;
    T db;
  };
  TIGON_HD static Grads backward(float dy, float a, float b) {
    const float g = round_to<T>(dy * b);  // dL/dh, a tensor of dtype T in autograd
    Grads out;
    out.db = from_float<T>(dy * gate(a));
    out.da = from_float<T>(Act::backward(g, a));
    return out;
  }

  // With multipliers gm, dm (float32; include/tigon/ops/glu.h): HF's gate(x) * gate_multiplier
  // is a tensor of T, so the activation's input is rounded to T; the output's multiplier rounds
  // again. Each step is exact for a multiplier of 1. The products are never contracted into a
  // later add (float32 keeps no rounding in between: nvcc could otherwise fuse a * gm into the
  // activation's first FMA, which PyTorch's separate kernels do not).
  TIGON_HD static float scaled(float x, float m) {
#if defined(__CUDA_ARCH__)
    return round_to<T>(__fmul_rn(x, m));
#else
    return round_to<T>(x * m);  // host code: -ffp-contract=off
#endif
  }

  TIGON_HD static T forward(float a, float b, float gm, float dm) {
    const float c = round_to<T>(gate(scaled(a, gm)) * b);
    return from_float<T>(scaled(c, dm));
  }

  TIGON_HD static Grads backward(float dy, float a, float b, float gm, float dm) {
    Grads out = backward(scaled(dy, dm), scaled(a, gm), b);  // dc, z
    out.da = from_float<T>(scaled(to_float(out.da), gm));    // dL/da = dL/dz * gm
    return out;
  }
};

}  // namespace tigon::math
