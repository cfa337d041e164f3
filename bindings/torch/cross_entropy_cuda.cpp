// Cross-entropy operators on CUDA tensors: the shared implementation on the current stream of the
// logits' device, with that device current. Compiled only with the CUDA backend.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cross_entropy.h"

namespace {

struct CeCudaContext {
  explicit CeCudaContext(const at::Tensor& t) {
    if (t.is_cuda()) {
      guard.set_device(t.device());
      stream.cuda_stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
    }
  }
  c10::cuda::OptionalCUDAGuard guard;
  tigon::Stream stream;
};

}  // namespace

#define TIGON_CE_CUDA_CONTEXT(t)   \
  const CeCudaContext context_(t); \
  const tigon::Stream stream = context_.stream
TIGON_CE_REGISTER(CUDA, TIGON_CE_CUDA_CONTEXT)
