// Gated RMSNorm operators: schemas and kernels (one per op for every device, cuda_context.h).
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/gated_rms_norm.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "gated_rms_norm_fwd";
constexpr const char* kBwd = "gated_rms_norm_bwd";
constexpr const char* kBwdInplace = "gated_rms_norm_bwd_inplace";

// tigon::gated_rms_norm_fwd; in_place is only read by the autograd kernel
// (gated_rms_norm_autograd.cpp).
std::tuple<at::Tensor, at::Tensor> gated_rms_norm_fwd(const at::Tensor& x_arg,
                                                      const at::Tensor& gate_arg,
                                                      const at::Tensor& weight_arg, double eps,
                                                      bool /*in_place*/) {
  const CudaContext context(x_arg);
  GatedRmsNormParams params;
  params.eps = static_cast<float>(eps);
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const at::Tensor gate = with_row_layout(gate_arg);
    at::Tensor y = at::empty(x.sizes(), x.options());
    at::Tensor rstd = empty_row_statistic(x);
    const TensorView xv = to_view(x, kFwd, "x");
    const at::Tensor weight = weight_arg.contiguous();  // kept alive for the view
    const TensorView wv = to_view(weight, kFwd, "weight");
    const at::Tensor workspace = empty_bytes(gated_rms_norm_fwd_workspace_size(params, xv, wv), x);
    tigon::gated_rms_norm_fwd(params, xv, to_view(gate, kFwd, "gate"), wv, to_view(y, kFwd, "y"),
                              to_view(flat(rstd), kFwd, "rstd"), to_workspace(workspace),
                              context.stream);
    return std::make_tuple(std::move(y), std::move(rstd));
  });
}

// tigon::gated_rms_norm_bwd writing dx into `dx` (dy itself for the in-place op); returns
// (dgate, dweight).
std::tuple<at::Tensor, at::Tensor> run_backward(const char* op, const at::Tensor& dy,
                                                const at::Tensor& x_arg, const at::Tensor& gate_arg,
                                                const at::Tensor& weight_arg,
                                                const at::Tensor& rstd, const at::Tensor& dx,
                                                Stream stream) {
  const GatedRmsNormParams params;  // eps is only read by the forward
  return translate_errors([&] {
    const at::Tensor x = with_row_layout(x_arg);
    const at::Tensor gate = with_row_layout(gate_arg);
    const at::Tensor weight = weight_arg.contiguous();
    const TensorView xv = to_view(x, op, "x");
    const TensorView wv = to_view(weight, op, "weight");
    const TensorView dyv = to_view(dy, op, "dy");
    const TensorView dxv = to_view(dx, op, "dx");
    at::Tensor dgate = at::empty(gate.sizes(), gate.options());
    at::Tensor dw = at::empty(weight.sizes(), weight.options());
    const at::Tensor workspace = empty_bytes(gated_rms_norm_bwd_workspace_size(params, xv, wv), x);
    tigon::gated_rms_norm_bwd(params, dyv, xv, to_view(gate, op, "gate"), wv,
                              to_view(flat(rstd), op, "rstd"), dxv, to_view(dgate, op, "dgate"),
                              to_view(dw, op, "dw"), to_workspace(workspace), stream);
    return std::make_tuple(std::move(dgate), std::move(dw));
  });
}

// Returns (dx, dgate, dweight).
std::tuple<at::Tensor, at::Tensor, at::Tensor> gated_rms_norm_bwd(const at::Tensor& dy,
                                                                  const at::Tensor& x,
                                                                  const at::Tensor& gate,
                                                                  const at::Tensor& weight,
                                                                  const at::Tensor& rstd) {
  const CudaContext context(x);
  at::Tensor dx = at::empty(x.sizes(), x.options());
  auto [dgate, dw] =
      run_backward(kBwd, with_row_layout(dy), x, gate, weight, rstd, dx, context.stream);
  return std::make_tuple(std::move(dx), std::move(dgate), std::move(dw));
}

// tigon::gated_rms_norm_bwd_inplace: dx is written into dy; returns (dgate, dweight).
std::tuple<at::Tensor, at::Tensor> gated_rms_norm_bwd_inplace(const at::Tensor& dy,
                                                              const at::Tensor& x,
                                                              const at::Tensor& gate,
                                                              const at::Tensor& weight,
                                                              const at::Tensor& rstd) {
  const CudaContext context(x);
  // dx is written into dy: dy needs a layout the core can address without a copy (its dtype,
  // x's, is the core's check).
  check_in_place_rows(kBwdInplace, "dy", dy);
  return run_backward(kBwdInplace, dy, x, gate, weight, rstd, dy, context.stream);
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &gated_rms_norm_fwd);
  m.impl(kBwd, &gated_rms_norm_bwd);
  m.impl(kBwdInplace, &gated_rms_norm_bwd_inplace);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // gated_rms_norm_autograd.cpp.
  m.set_python_module("tigon.ops.gated_rms_norm");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "gated_rms_norm_fwd(Tensor x, Tensor gate, Tensor weight, float eps, bool in_place=False) "
      "-> (Tensor y, Tensor rstd)",
      tags);
  m.def(
      "gated_rms_norm_bwd(Tensor dy, Tensor x, Tensor gate, Tensor weight, Tensor rstd) "
      "-> (Tensor dx, Tensor dgate, Tensor dweight)",
      tags);
  m.def(
      "gated_rms_norm_bwd_inplace(Tensor(a!) dy, Tensor x, Tensor gate, Tensor weight, "
      "Tensor rstd) -> (Tensor dgate, Tensor dweight)",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("gated_rms_norm_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
