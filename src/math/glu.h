// SwiGLU / GeGLU formulas, per element, written once for the CPU and CUDA backends
// (src/math/glu-inl.h, over Ops: src/math/lanes.h). This header gives their scalar float32 form,
// which the CUDA backend and the CPU backend's scalar paths call; the CPU backend's vector path
// instantiates the same text for Highway vectors (src/cpu/simd/).
#pragma once

#include "math/activations.h"
#include "math/float_types.h"
#include "math/host_device.h"
#include "math/lanes.h"
#include "tigon/ops/glu.h"

namespace tigon::math {

#include "math/glu-inl.h"

// The activation of one float32 value (kBeta and kKappa of GeGLU are ActivationLanes').
template <GluActivation kAct>
struct Activation : ActivationLanes<kAct> {
  TIGON_HD static float forward(float a) {
    return ActivationLanes<kAct>::template forward<ScalarOps>(a);
  }
  TIGON_HD static float backward(float g, float a) {
    return ActivationLanes<kAct>::template backward<ScalarOps>(g, a);
  }
};

// T: storage type of every tensor (float, Half, BFloat16).
template <GluActivation kAct, typename T>
struct Glu {
  using Lanes = GluLanes<kAct, T>;
  using Act = Activation<kAct>;

  TIGON_HD static float gate(float a) { return Lanes::template gate<ScalarOps>(a); }
  TIGON_HD static float scaled(float x, float m) { return Lanes::template scaled<ScalarOps>(x, m); }

  TIGON_HD static T forward(float a, float b) {
    return from_float<T>(Lanes::template forward<ScalarOps>(a, b));
  }
  TIGON_HD static T forward(float a, float b, float gm, float dm) {
    return from_float<T>(Lanes::template forward<ScalarOps>(a, b, gm, dm));
  }

  struct Grads {
    T da;
    T db;
  };
  TIGON_HD static Grads backward(float dy, float a, float b) {
    float da, db;
    Lanes::template backward<ScalarOps>(dy, a, b, da, db);
    return {from_float<T>(da), from_float<T>(db)};
  }
  TIGON_HD static Grads backward(float dy, float a, float b, float gm, float dm) {
    float da, db;
    Lanes::template backward<ScalarOps>(dy, a, b, gm, dm, da, db);
    return {from_float<T>(da), from_float<T>(db)};
  }
};

}  // namespace tigon::math
