// RMSNorm operators on CUDA tensors: the shared implementation on the current stream of the
// tensors' device. Compiled only with the CUDA backend (TIGON_WITH_CUDA).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "rms_norm.h"

namespace {

using tigon::Stream;
namespace tb = tigon::torch_binding;

// The CUDA kernel is chosen when any argument is a CUDA tensor. When x is not one, the op still
// runs on no stream of ours: the core then reports the device mismatch, naming the argument.
struct CudaContext {
  explicit CudaContext(const at::Tensor& x) {
    if (x.is_cuda()) {
      guard.set_device(x.device());
      stream.cuda_stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
    }
  }
  c10::cuda::OptionalCUDAGuard guard;
  Stream stream;
};

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cuda(const at::Tensor& x,
                                                     const std::optional<at::Tensor>& weight,
                                                     double eps, double offset,
                                                     c10::string_view casting_mode, bool in_place) {
  const CudaContext ctx(x);
  return tb::rms_norm_fwd(x, weight, eps, offset, casting_mode, in_place, ctx.stream);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_bwd_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                     const std::optional<at::Tensor>& weight,
                                                     const at::Tensor& rstd, double offset,
                                                     c10::string_view casting_mode) {
  const CudaContext ctx(x);
  return tb::rms_norm_bwd(dy, x, weight, rstd, offset, casting_mode, ctx.stream);
}

at::Tensor rms_norm_bwd_inplace_cuda(const at::Tensor& dy, const at::Tensor& x,
                                     const std::optional<at::Tensor>& weight,
                                     const at::Tensor& rstd, double offset,
                                     c10::string_view casting_mode) {
  const CudaContext ctx(x);
  return tb::rms_norm_bwd_inplace(dy, x, weight, rstd, offset, casting_mode, ctx.stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(tigon, CUDA, m) {
  m.impl("rms_norm_fwd", &rms_norm_fwd_cuda);
  m.impl("rms_norm_bwd", &rms_norm_bwd_cuda);
  m.impl("rms_norm_bwd_inplace", &rms_norm_bwd_inplace_cuda);
}
