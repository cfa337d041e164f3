// RoPE formulas for one rotated channel pair (i, i + h) and one pass-through channel. Written
// once, compiled by g++ for the CPU backend and by nvcc for the CUDA backend; the backends only
// move data. The cast order is the spec (include/tigon/ops/rope.h, docs/ops/rope.md).
#pragma once

#include "math/float_types.h"
#include "math/host_device.h"

namespace tigon::math {

// T: activation storage type (q, k and dx), C: cos / sin storage type.
template <typename T, typename C>
struct Rope {
  using X = T;
  using Cos = C;
  using P = Promote<T, C>;  // y and dy: PyTorch's promotion of T and C

  // HF's three eager ops in P: q * cos, rotate_half(q) * sin, their sum. The product of two
  // storage values is exact in float32, so round_P of the float32 product is the op's result.
  TIGON_HD static float first(float x1, float x2, float c1, float s1) {
    return round_to<P>(round_to<P>(x1 * c1) + round_to<P>(-x2 * s1));
  }
  TIGON_HD static float second(float x1, float x2, float c2, float s2) {
    return round_to<P>(round_to<P>(x2 * c2) + round_to<P>(x1 * s2));
  }

  // Backward: each multiply's gradient is formed in P and rounded to T (the dtype of the
  // multiply's input), then the two gradients of a channel are summed in T. "+ 0.0f" is the
  // zero-filled slice gradient autograd adds: it turns a -0 sum into +0 (never folded away
  // without -ffast-math).
  TIGON_HD static float branch(float dy, float factor) {
    return round_to<T>(round_to<P>(dy * factor));
  }
  TIGON_HD static float grad_first(float dy1, float dy2, float c1, float s2) {
    return round_to<T>(branch(dy1, c1) + branch(dy2, s2)) + 0.0f;
  }
  TIGON_HD static float grad_second(float dy1, float dy2, float c2, float s1) {
    return round_to<T>(branch(dy2, c2) - branch(dy1, s1)) + 0.0f;
  }

  // Channels >= R: the forward copies (widening to P is exact); the backward rounds to T.
  TIGON_HD static float grad_pass(float dy) { return round_to<T>(dy) + 0.0f; }
};

}  // namespace tigon::math
