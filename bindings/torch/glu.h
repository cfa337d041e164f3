// The SwiGLU / GeGLU operators' names and helpers shared by their kernels (glu.cpp) and autograd
// kernels (glu_autograd.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "tigon/ops/glu.h"

namespace tigon::torch_binding {

// The op names of one activation ("swiglu_fwd", ...; "tigon::" + name is the operator).
struct GluNames {
  const char* fwd;
  const char* bwd;
  const char* bwd_inplace;
  const char* packed_fwd;
  const char* down_proj_fwd;
  const char* packed_down_proj_fwd;
};
GluNames glu_names(GluActivation act);

// gate, up = gate_up.chunk(2, -1) (views); c10::ValueError naming gate_up for an odd last
// dimension.
std::pair<at::Tensor, at::Tensor> glu_halves(const at::Tensor& gate_up, const char* op);

// tigon::<swiglu|geglu>_fwd(a, b) through the dispatcher: the device's kernel, or a tracer's.
at::Tensor call_glu_fwd(GluActivation act, const at::Tensor& a, const at::Tensor& b,
                        double gate_multiplier = 1.0, double down_multiplier = 1.0);

}  // namespace tigon::torch_binding
