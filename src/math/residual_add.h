// The residual add of fused_add_rms_norm: h = x + residual in x's dtype, and the backward's sum
// of h's two gradients. Written once for both backends; the normalization of h is RmsNorm's
// (math/rms_norm.h). The cast order is the spec (include/tigon/ops/fused_add_rms_norm.h).
#pragma once

#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

// X: the storage type of x, residual, h and dx.
template <typename X>
struct ResidualAdd {
  // HF's `residual + hidden_states` in X: PyTorch adds two X values in float32 and rounds once.
  TIGON_HD static X sum(X x, X residual) { return from_float<X>(to_float(x) + to_float(residual)); }

  // dh + the norm's dx, as autograd accumulates them: the norm's dx is rounded to X first (it is
  // a tensor of X in the unfused graph), then the sum of the two X values is rounded once.
  TIGON_HD static X grad(float dh, float norm_dx) {
    return from_float<X>(dh + round_to<X>(norm_dx));
  }
};

}  // namespace tigon::math
