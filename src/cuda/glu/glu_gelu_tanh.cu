// The GeGLU kernels (one translation unit per activation: parallel compilation).
#include "cuda/glu/launch.cuh"

namespace tigon::cuda::glu {
TIGON_GLU_ACTIVATION(, GluActivation::kGeluTanh)
}  // namespace tigon::cuda::glu
