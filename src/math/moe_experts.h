// Mixture-of-experts experts: the per-element formulas around the GEMMs and the GLU, written once
// for the CPU and CUDA backends (include/tigon/ops/moe_experts.h gives the whole op). T: the
// activations' dtype; W: the routing weights' dtype (float or T). The GLU between the GEMMs is
// math::Glu (src/math/glu.h).
#pragma once

#include <type_traits>

#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

template <typename T, typename W>
struct MoeExperts {
  // P = promote(T, W): HF's product by the routing weight runs in P.
  static constexpr bool kProductInT = std::is_same_v<T, W>;

  // round_P(v) for a float32 product v.
  TIGON_HD static float product(float v) { return kProductInT ? round_to<T>(v) : v; }

  // c = round_T(round_P(d * w)): one expert's contribution to a token's output.
  TIGON_HD static T weighted(T d, W w) { return from_float<T>(product(to_float(d) * to_float(w))); }

  // HF's index_add_ in T: acc = round_T(acc + c).
  TIGON_HD static T add(T acc, T c) { return from_float<T>(to_float(acc) + to_float(c)); }

  // dd = round_T(dout * w): the gradient of the expert's output d.
  TIGON_HD static T grad_expert_out(T dout, W w) {
    return from_float<T>(to_float(dout) * to_float(w));
  }

  // One term of dw = round_W(sum_h round_P(dout[h] * d[h])).
  TIGON_HD static float grad_weight_term(T dout, T d) {
    return product(to_float(dout) * to_float(d));
  }
  TIGON_HD static W grad_weight(float sum) { return from_float<W>(sum); }
};

}  // namespace tigon::math
