// SwiGLU / GeGLU operators on CUDA tensors: the shared implementation on the current stream of
// a's device. Compiled only with the CUDA backend (TIGON_WITH_CUDA).
#include <torch/library.h>

#include "cuda_context.h"
#include "glu.h"

namespace {

using tigon::GluActivation;
namespace tb = tigon::torch_binding;
using tb::CudaContext;

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
