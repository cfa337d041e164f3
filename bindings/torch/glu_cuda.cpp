// SwiGLU / GeGLU operators on CUDA tensors: the shared implementation on the current stream of
// a's device. Compiled only with the CUDA backend (TIGON_WITH_CUDA).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "glu.h"

namespace {

using tigon::GluActivation;
using tigon::Stream;
namespace tb = tigon::torch_binding;

// When a is not a CUDA tensor the op runs on no stream of ours: the core then reports the device
// mismatch, naming the argument.
struct CudaContext {
  explicit CudaContext(const at::Tensor& a) {
    if (a.is_cuda()) {
      guard.set_device(a.device());
      stream.cuda_stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
    }
  }
  c10::cuda::OptionalCUDAGuard guard;
  Stream stream;
};

template <GluActivation kAct>
at::Tensor fwd_cuda(const at::Tensor& a, const at::Tensor& b, bool /*in_place*/) {
  const CudaContext ctx(a);
  return tb::glu_fwd(kAct, a, b, ctx.stream);
}
template <GluActivation kAct>
std::tuple<at::Tensor, at::Tensor> bwd_cuda(const at::Tensor& dy, const at::Tensor& a,
                                            const at::Tensor& b) {
  const CudaContext ctx(a);
  return tb::glu_bwd(kAct, dy, a, b, ctx.stream);
}
template <GluActivation kAct>
void bwd_inplace_cuda(const at::Tensor& dy, const at::Tensor& a, const at::Tensor& b) {
  const CudaContext ctx(a);
  tb::glu_bwd_inplace(kAct, dy, a, b, ctx.stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(tigon, CUDA, m) {
  m.impl("swiglu_fwd", &fwd_cuda<GluActivation::kSilu>);
  m.impl("swiglu_bwd", &bwd_cuda<GluActivation::kSilu>);
  m.impl("swiglu_bwd_inplace", &bwd_inplace_cuda<GluActivation::kSilu>);
  m.impl("geglu_fwd", &fwd_cuda<GluActivation::kGeluTanh>);
  m.impl("geglu_bwd", &bwd_cuda<GluActivation::kGeluTanh>);
  m.impl("geglu_bwd_inplace", &bwd_inplace_cuda<GluActivation::kGeluTanh>);
}
