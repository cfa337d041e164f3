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
  // tigon's own float32 tanh (math/activations.h), not the platform's tanhf: built from correctly
  // rounded +, -, *, / only, it gives the same bits on the host and on the device (compiled with
  // -fmad=false), so the CPU and CUDA backends agree bit for bit.
  TIGON_HD static float activation(float alpha, float x) { return tanh_f32(alpha * x); }
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
