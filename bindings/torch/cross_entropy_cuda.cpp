// Cross-entropy operators on CUDA tensors: the shared implementation on the current stream of the
// logits' device, with that device current. Compiled only with the CUDA backend.
#include "cross_entropy.h"
#include "cuda_context.h"

#define TIGON_CE_CUDA_CONTEXT(t)                       \
  const tigon::torch_binding::CudaContext context_(t); \
  const tigon::Stream stream = context_.stream
TIGON_CE_REGISTER(CUDA, TIGON_CE_CUDA_CONTEXT)
