// Per-activation entry points of the SwiGLU / GeGLU kernels, each compiled in its own translation
// unit (glu_<activation>.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "ops/glu_args.h"
#include "tigon/ops/glu.h"

namespace tigon::cuda::glu {

template <GluActivation kAct>
void fwd_for_activation(const detail::GluFwdArgs& a, cudaStream_t stream);

template <GluActivation kAct>
void bwd_for_activation(const detail::GluBwdArgs& a, cudaStream_t stream);

#define TIGON_GLU_ACTIVATION(kind, act)                                                \
  kind template void fwd_for_activation<act>(const detail::GluFwdArgs&, cudaStream_t); \
  kind template void bwd_for_activation<act>(const detail::GluBwdArgs&, cudaStream_t);

TIGON_GLU_ACTIVATION(extern, GluActivation::kSilu)
TIGON_GLU_ACTIVATION(extern, GluActivation::kGeluTanh)

}  // namespace tigon::cuda::glu
