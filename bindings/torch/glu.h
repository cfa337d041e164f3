// The SwiGLU / GeGLU torch operators, shared by the CPU and CUDA registrations: they differ only
// in the stream they pass to the tigon API (and the device guard the CUDA registration holds).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "tigon/ops/glu.h"
#include "tigon/tensor.h"

namespace tigon::torch_binding {

// tigon::<swiglu|geglu>_fwd(Tensor a, Tensor b, bool in_place=False) -> Tensor y
// in_place is only read by the autograd formula (python/tigon/ops/glu.py).
at::Tensor glu_fwd(GluActivation act, const at::Tensor& a, const at::Tensor& b, Stream stream);

// tigon::<swiglu|geglu>_bwd(Tensor dy, Tensor a, Tensor b) -> (Tensor da, Tensor db)
std::tuple<at::Tensor, at::Tensor> glu_bwd(GluActivation act, const at::Tensor& dy,
                                           const at::Tensor& a, const at::Tensor& b, Stream stream);

// tigon::<swiglu|geglu>_bwd_inplace(Tensor dy, Tensor(a!) a, Tensor(b!) b) -> (): da is written
// into a and db into b.
void glu_bwd_inplace(GluActivation act, const at::Tensor& dy, const at::Tensor& a,
                     const at::Tensor& b, Stream stream);

}  // namespace tigon::torch_binding
