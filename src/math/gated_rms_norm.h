// Gated RMSNorm formulas, per element: RMSNorm's kLlama steps (math/rms_norm.h) and SwiGLU's
// silu (math/glu.h) composed in HF's cast order; nothing here is a new formula. Compiled by g++
// for the CPU backend and by nvcc for the CUDA backend. The cast order is the spec
// (include/tigon/ops/gated_rms_norm.h, docs/ops/gated_rms_norm.md).
#pragma once

#include "math/float_types.h"
#include "math/glu.h"
#include "math/host_device.h"
#include "math/rms_norm.h"

namespace tigon::math {

// X: storage type of x, gate, y, dy, dx and dgate; W: the weight's.
template <typename X, typename W>
struct GatedRmsNorm {
  using Norm = RmsNorm<CastingMode::kLlama, X, W, /*kAffine=*/true>;
  using Silu = Activation<GluActivation::kSilu>;

  // p = round_P(w * round_T(x * r)), as float32: the RMSNorm output HF multiplies by the gate.
  TIGON_HD static float weighted(float x, float r, W w) {
    return to_float(Norm::output(Norm::normalized(x, r), Norm::scale(w, 0.0f)));
  }

  // y = round_T(p * silu(gate)).
  TIGON_HD static X output(float p, float gate) { return from_float<X>(p * Silu::forward(gate)); }

  // dp = dy * silu(gate): the gradient reaching the RMSNorm output, fed to RmsNorm's backward.
  TIGON_HD static float grad_norm_output(float dy, float gate) { return dy * Silu::forward(gate); }

  // dgate = silu_backward(dy * p, gate).
  TIGON_HD static X grad_gate(float dy, float p, float gate) {
    return from_float<X>(Silu::backward(dy * p, gate));
  }
};

}  // namespace tigon::math
