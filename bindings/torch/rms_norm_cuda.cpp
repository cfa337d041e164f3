// RMSNorm operators on CUDA tensors: the shared implementation on the current stream of the
// tensors' device. Compiled only with the CUDA backend (TIGON_WITH_CUDA).
#include <torch/library.h>

#include "cuda_context.h"
#include "rms_norm.h"

namespace {

namespace tb = tigon::torch_binding;
using tb::CudaContext;

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
