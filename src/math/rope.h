// RoPE formulas for one rotated channel pair (i, i + h) and one pass-through channel. Written
// once (src/math/rope-inl.h, over Ops: src/math/lanes.h), compiled by g++ for the CPU backend and
// by nvcc for the CUDA backend; the backends only move data. This header gives the scalar
// float32 form; the CPU backend's vector path instantiates the same text for Highway vectors.
#pragma once

#include "math/float_types.h"
#include "math/host_device.h"
#include "math/lanes.h"

namespace tigon::math {

#include "math/rope-inl.h"

// T: activation storage type (q, k and dx), C: cos / sin storage type.
template <typename T, typename C>
struct Rope {
  using Lanes = RopeLanes<T, C>;
  using X = T;
  using Cos = C;
  using P = typename Lanes::P;

  TIGON_HD static float first(float x1, float x2, float c1, float s1) {
    return Lanes::template first<ScalarOps>(x1, x2, c1, s1);
  }
  TIGON_HD static float second(float x1, float x2, float c2, float s2) {
    return Lanes::template second<ScalarOps>(x1, x2, c2, s2);
  }
  TIGON_HD static float grad_first(float dy1, float dy2, float c1, float s2) {
    return Lanes::template grad_first<ScalarOps>(dy1, dy2, c1, s2);
  }
  TIGON_HD static float grad_second(float dy1, float dy2, float c2, float s1) {
    return Lanes::template grad_second<ScalarOps>(dy1, dy2, c2, s1);
  }
  TIGON_HD static float grad_pass(float dy) { return Lanes::template grad_pass<ScalarOps>(dy); }
};

}  // namespace tigon::math
