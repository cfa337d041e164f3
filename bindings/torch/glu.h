// The SwiGLU / GeGLU torch operators, shared by the CPU and CUDA registrations: they differ only
// in the stream they pass to the tigon API (and the device guard the CUDA registration holds).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>
#include <utility>

#include "tigon/ops/glu.h"
#include "tigon/tensor.h"

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
at::Tensor call_glu_fwd(GluActivation act, const at::Tensor& a, const at::Tensor& b);

// tigon::<swiglu|geglu>_fwd(Tensor a, Tensor b, bool in_place=False) -> Tensor y
// in_place is only read by the autograd kernel (glu_autograd.cpp).
at::Tensor glu_fwd(GluActivation act, const at::Tensor& a, const at::Tensor& b, Stream stream);

// tigon::<swiglu|geglu>_bwd(Tensor dy, Tensor a, Tensor b) -> (Tensor da, Tensor db)
std::tuple<at::Tensor, at::Tensor> glu_bwd(GluActivation act, const at::Tensor& dy,
                                           const at::Tensor& a, const at::Tensor& b, Stream stream);

// tigon::<swiglu|geglu>_bwd_inplace(Tensor dy, Tensor(a!) a, Tensor(b!) b) -> (): da is written
// into a and db into b.
void glu_bwd_inplace(GluActivation act, const at::Tensor& dy, const at::Tensor& a,
                     const at::Tensor& b, Stream stream);

}  // namespace tigon::torch_binding
