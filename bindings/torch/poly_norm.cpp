// PolyNorm operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/poly_norm.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "poly_norm_fwd";
constexpr const char* kBwd = "poly_norm_bwd";

at::Tensor poly_norm_fwd(const at::Tensor& x_arg, const at::Tensor& weight, const at::Tensor& bias,
                         double eps) {
  const CudaContext context(x_arg);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    at::Tensor y = at::empty(x.sizes(), x.options());
    // eps in float32, as the peer's kernel pins it.
    tigon::poly_norm_fwd(to_view(x, kFwd, "x"), to_view(weight.contiguous(), kFwd, "weight"),
                         to_view(bias, kFwd, "bias"), to_view(y, kFwd, "y"),
                         static_cast<float>(eps), {}, context.stream);
    return y;
  });
}

// Returns (dx, dweight, dbias).
std::tuple<at::Tensor, at::Tensor, at::Tensor> poly_norm_bwd(const at::Tensor& dy_arg,
                                                             const at::Tensor& x_arg,
                                                             const at::Tensor& weight_arg,
                                                             const at::Tensor& bias, double eps) {
  const CudaContext context(x_arg);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const at::Tensor dy = with_row_layout(dy_arg);
    const at::Tensor weight = weight_arg.contiguous();
    const TensorView xv = to_view(x, kBwd, "x");
    at::Tensor dx = at::empty(x.sizes(), x.options());
    at::Tensor dweight = at::empty(weight.sizes(), weight.options());
    at::Tensor dbias = at::empty(bias.sizes(), bias.options());
    const at::Tensor workspace = empty_bytes(poly_norm_bwd_workspace_size(xv), x);
    tigon::poly_norm_bwd(to_view(dy, kBwd, "dy"), xv, to_view(weight, kBwd, "weight"),
                         to_view(bias, kBwd, "bias"), to_view(dx, kBwd, "dx"),
                         to_view(dweight, kBwd, "dweight"), to_view(dbias, kBwd, "dbias"),
                         static_cast<float>(eps), to_workspace(workspace), context.stream);
    return std::make_tuple(std::move(dx), std::move(dweight), std::move(dbias));
  });
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &poly_norm_fwd);
  m.impl(kBwd, &poly_norm_bwd);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // poly_norm_autograd.cpp.
  m.set_python_module("tigon.ops.poly_norm");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def("poly_norm_fwd(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor y", tags);
  m.def(
      "poly_norm_bwd(Tensor dy, Tensor x, Tensor weight, Tensor bias, float eps) "
      "-> (Tensor dx, Tensor dweight, Tensor dbias)",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
