// RoPE operators on CUDA tensors: the shared implementation on the current stream of q's device.
// Compiled only with the CUDA backend (TIGON_WITH_CUDA).
#include <torch/library.h>

#include "cuda_context.h"
#include "rope.h"

namespace {

namespace tb = tigon::torch_binding;
using tb::CudaContext;

std::tuple<at::Tensor, at::Tensor> rope_fwd_cuda(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& cos, const at::Tensor& sin,
                                                 int64_t unsqueeze_dim, bool /*in_place*/) {
  const CudaContext ctx(q);
  return tb::rope_fwd(q, k, cos, sin, unsqueeze_dim, ctx.stream);
}

void rope_fwd_inplace_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                           const at::Tensor& sin, int64_t unsqueeze_dim) {
  const CudaContext ctx(q);
  tb::rope_fwd_inplace(q, k, cos, sin, unsqueeze_dim, ctx.stream);
}

std::tuple<at::Tensor, at::Tensor> rope_bwd_cuda(const at::Tensor& dq_embed,
                                                 const at::Tensor& dk_embed, const at::Tensor& cos,
                                                 const at::Tensor& sin, int64_t unsqueeze_dim,
                                                 at::ScalarType dtype) {
  const CudaContext ctx(dq_embed);
  return tb::rope_bwd(dq_embed, dk_embed, cos, sin, unsqueeze_dim, dtype, ctx.stream);
}

void rope_bwd_inplace_cuda(const at::Tensor& dq_embed, const at::Tensor& dk_embed,
                           const at::Tensor& cos, const at::Tensor& sin, int64_t unsqueeze_dim) {
  const CudaContext ctx(dq_embed);
  tb::rope_bwd_inplace(dq_embed, dk_embed, cos, sin, unsqueeze_dim, ctx.stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(tigon, CUDA, m) {
  m.impl("rope_fwd", &rope_fwd_cuda);
  m.impl("rope_fwd_inplace", &rope_fwd_inplace_cuda);
  m.impl("rope_bwd", &rope_bwd_cuda);
  m.impl("rope_bwd_inplace", &rope_bwd_inplace_cuda);
}
