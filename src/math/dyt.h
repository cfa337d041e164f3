// DyT formulas, per element. Written once, compiled by g++ for the CPU backend and by nvcc for the
// CUDA backend; the backends only move data and sum. The cast order is the spec
// (include/tigon/ops/dyt.h, docs/ops/dyt.md).
#pragma once

#include <cmath>

#include "math/activations.h"
#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

// X: activation storage type (y, dy and dx too). Parameters arrive as float32 values.
template <typename X>
struct DyT {
  // act_tanh (math/activations.h), as GeGLU's: CUDA's tanhf on the device (what torch.tanh runs
  // on CUDA, and cheap: tanh_f32 there, computing both its branches without FMA, is about 85
  // instructions an element where the copy ceiling leaves room for about 40 in bf16, an estimate
  // from the instruction count), tigon's own tanh_f32 on the host (+, -, *, / only: independent
  // of the libm). The two agree within float32 ulps: the backends' y and dx within a rounding of T.
  TIGON_HD static float activation(float alpha, float x) { return act_tanh(alpha * x); }
  TIGON_HD static X output(float t, float gamma, float beta) {
    return from_float<X>(gamma * t + beta);
  }

  // u = (1 - t^2) * dy * gamma: the gradient reaching alpha * x.
  TIGON_HD static float grad_pre(float t, float dy, float gamma) {
    return (1.0f - t * t) * dy * gamma;
  }
  TIGON_HD static X grad_input(float alpha, float u) { return from_float<X>(alpha * u); }
  TIGON_HD static float grad_alpha_term(float x, float u) { return x * u; }
  TIGON_HD static float grad_gamma_term(float dy, float t) { return dy * t; }
};

}  // namespace tigon::math
