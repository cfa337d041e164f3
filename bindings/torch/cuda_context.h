// The only device-specific part of tigon's torch kernels (bindings/torch/<op>.cpp): each kernel is
// one function for every device, registered for CPU and, when the bindings are built with CUDA
// (TIGON_TORCH_WITH_CUDA), for CUDA by the same register_kernels(m); it opens with
//   const CudaContext context(x);
// and passes context.stream to the tigon API.
#pragma once

#include <ATen/core/Tensor.h>

#if defined(TIGON_TORCH_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "tigon/tensor.h"

namespace tigon::torch_binding {

// For a CUDA tensor `t`: while alive, makes t's device current, and `stream` is torch's current
// stream on that device. Otherwise it does neither and `stream` is no stream: the CPU backend
// needs none, and for a tensor of another device the core reports the mismatch, naming the
// argument.
struct CudaContext {
  explicit CudaContext([[maybe_unused]] const at::Tensor& t) {
#if defined(TIGON_TORCH_WITH_CUDA)
    if (t.is_cuda()) {
      guard.set_device(t.device());
      stream.cuda_stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
    }
#endif
  }
#if defined(TIGON_TORCH_WITH_CUDA)
  c10::cuda::OptionalCUDAGuard guard;
#endif
  Stream stream;
};

}  // namespace tigon::torch_binding
