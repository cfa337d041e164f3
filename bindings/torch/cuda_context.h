// The device guard and torch stream for an operator on CUDA tensors. Include only where the
// bindings are built with CUDA (TIGON_TORCH_WITH_CUDA).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "tigon/tensor.h"

namespace tigon::torch_binding {

// While alive, makes `t`'s device current; `stream` is torch's current stream on that device.
// When `t` is not a CUDA tensor it does neither and the op runs on no stream of ours: the core
// then reports the device mismatch, naming the argument.
struct CudaContext {
  explicit CudaContext(const at::Tensor& t) {
    if (t.is_cuda()) {
      guard.set_device(t.device());
      stream.cuda_stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
    }
  }
  c10::cuda::OptionalCUDAGuard guard;
  Stream stream;
};

}  // namespace tigon::torch_binding
