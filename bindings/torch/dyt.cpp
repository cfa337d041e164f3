// DyT operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/dyt.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "dyt_fwd";
constexpr const char* kBwd = "dyt_bwd";

at::Tensor dyt_fwd(const at::Tensor& x_arg, const at::Tensor& alpha, const at::Tensor& gamma,
                   const std::optional<at::Tensor>& beta) {
  const CudaContext context(x_arg);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    at::Tensor y = at::empty(x.sizes(), x.options());
    tigon::dyt_fwd(to_view(x, kFwd, "x"), to_view(alpha, kFwd, "alpha"),
                   to_view(gamma.contiguous(), kFwd, "gamma"),
                   to_view(contiguous_parameter(beta), kFwd, "beta"), to_view(y, kFwd, "y"), {},
                   context.stream);
    return y;
  });
}

// Returns (dx, dalpha, dgamma, dbeta); dbeta is an empty [0] tensor without beta.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> dyt_bwd(
    const at::Tensor& dy_arg, const at::Tensor& x_arg, const at::Tensor& alpha,
    const at::Tensor& gamma_arg, const std::optional<at::Tensor>& beta_arg) {
  const CudaContext context(x_arg);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const at::Tensor dy = with_row_layout(dy_arg);
    const at::Tensor gamma = gamma_arg.contiguous();
    const std::optional<at::Tensor> beta = contiguous_parameter(beta_arg);
    const TensorView xv = to_view(x, kBwd, "x");
    at::Tensor dx = at::empty(x.sizes(), x.options());
    at::Tensor dalpha = at::empty(alpha.sizes(), alpha.options());
    at::Tensor dgamma = at::empty(gamma.sizes(), gamma.options());
    at::Tensor dbeta = empty_parameter_grad(beta, x);
    const at::Tensor workspace = empty_bytes(dyt_bwd_workspace_size(xv, beta.has_value()), x);
    tigon::dyt_bwd(
        to_view(dy, kBwd, "dy"), xv, to_view(alpha, kBwd, "alpha"), to_view(gamma, kBwd, "gamma"),
        to_view(beta, kBwd, "beta"), to_view(dx, kBwd, "dx"), to_view(dalpha, kBwd, "dalpha"),
        to_view(dgamma, kBwd, "dgamma"), beta ? to_view(dbeta, kBwd, "dbeta") : TensorView{},
        to_workspace(workspace), context.stream);
    return std::make_tuple(std::move(dx), std::move(dalpha), std::move(dgamma), std::move(dbeta));
  });
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &dyt_fwd);
  m.impl(kBwd, &dyt_bwd);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // dyt_autograd.cpp.
  m.set_python_module("tigon.ops.dyt");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def("dyt_fwd(Tensor x, Tensor alpha, Tensor gamma, Tensor? beta) -> Tensor y", tags);
  m.def(
      "dyt_bwd(Tensor dy, Tensor x, Tensor alpha, Tensor gamma, Tensor? beta) "
      "-> (Tensor dx, Tensor dalpha, Tensor dgamma, Tensor dbeta)",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
