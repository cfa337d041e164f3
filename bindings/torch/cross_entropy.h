// The cross-entropy torch operators, shared by the CPU and CUDA registrations (they differ only in
// the stream and device guard).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "tigon/ops/cross_entropy.h"
#include "tigon/tensor.h"

namespace tigon::torch_binding {

struct CeOptions {
  std::int64_t ignore_index;
  c10::string_view reduction;
  double label_smoothing;
  double lse_square_scale;
  double softcap;
};

// (loss, z_loss, lse, grad): grad is the fused gradient for upstream 1 when compute_grad, else an
// empty [0] tensor.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> cross_entropy_fwd(
    const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& divisor, const CeOptions& o, bool compute_grad, bool in_place,
    Stream stream);

at::Tensor cross_entropy_bwd(const at::Tensor& grad_loss, const at::Tensor& logits,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& divisor, const at::Tensor& lse,
                             const CeOptions& o, Stream stream);

void cross_entropy_scale_grad(const at::Tensor& grad, const at::Tensor& grad_loss, Stream stream);

// The gradients a forward computed for upstream gradient 1 (cross-entropy's, fused linear
// cross-entropy's), handed to its backward. Kept in ctx->saved_data under `key` by reference, not
// with save_for_backward, so that the tensor the backward returns is the only reference and the
// leaf's AccumulateGrad adopts it as .grad without a copy.
void stash_forward_grad(torch::autograd::AutogradContext* ctx, const char* key,
                        const at::Tensor& grad);

// The gradient stashed under `key` times grad_loss (one element, read on the device): scaled in
// place (a no-op for upstream 1) when nothing else can observe it (unobservable.h), else into a
// new buffer (torch.compile is tracing, or a direct caller of the op still holds the gradient
// output). The stash is emptied: a second backward through the graph is refused.
at::Tensor scaled_forward_grad(torch::autograd::AutogradContext* ctx, const char* key,
                               const at::Tensor& grad_loss);

}  // namespace tigon::torch_binding

// Registers the four operators for dispatch key DISPATCH; CONTEXT(tensor) declares `stream`
// (and holds whatever device guard the backend needs) for the call.
#define TIGON_CE_REGISTER(DISPATCH, CONTEXT)                                                     \
  namespace {                                                                                    \
  namespace tb = tigon::torch_binding;                                                           \
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> ce_fwd_##DISPATCH(                  \
      const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& w,    \
      const std::optional<at::Tensor>& d, int64_t ii, c10::string_view r, double ls, double z,   \
      double sc, bool g) {                                                                       \
    CONTEXT(logits);                                                                             \
    return tb::cross_entropy_fwd(logits, target, w, d, {ii, r, ls, z, sc}, g, false, stream);    \
  }                                                                                              \
  std::tuple<at::Tensor, at::Tensor, at::Tensor> ce_fwd_inplace_##DISPATCH(                      \
      const at::Tensor& logits, const at::Tensor& target, const std::optional<at::Tensor>& w,    \
      const std::optional<at::Tensor>& d, int64_t ii, c10::string_view r, double ls, double z,   \
      double sc) {                                                                               \
    CONTEXT(logits);                                                                             \
    auto [loss, zl, lse, unused] =                                                               \
        tb::cross_entropy_fwd(logits, target, w, d, {ii, r, ls, z, sc}, true, true, stream);     \
    return std::make_tuple(loss, zl, lse);                                                       \
  }                                                                                              \
  at::Tensor ce_bwd_##DISPATCH(const at::Tensor& gl, const at::Tensor& logits,                   \
                               const at::Tensor& target, const std::optional<at::Tensor>& w,     \
                               const std::optional<at::Tensor>& d, const at::Tensor& lse,        \
                               int64_t ii, c10::string_view r, double ls, double z, double sc) { \
    CONTEXT(logits);                                                                             \
    return tb::cross_entropy_bwd(gl, logits, target, w, d, lse, {ii, r, ls, z, sc}, stream);     \
  }                                                                                              \
  void ce_scale_##DISPATCH(const at::Tensor& grad, const at::Tensor& gl) {                       \
    CONTEXT(grad);                                                                               \
    tb::cross_entropy_scale_grad(grad, gl, stream);                                              \
  }                                                                                              \
  at::Tensor ce_scaled_##DISPATCH(const at::Tensor& grad, const at::Tensor& gl) {                \
    CONTEXT(grad);                                                                               \
    at::Tensor out = grad.clone(at::MemoryFormat::Contiguous);                                   \
    tb::cross_entropy_scale_grad(out, gl, stream);                                               \
    return out;                                                                                  \
  }                                                                                              \
  }                                                                                              \
  TORCH_LIBRARY_IMPL(tigon, DISPATCH, m) {                                                       \
    m.impl("cross_entropy_fwd", &ce_fwd_##DISPATCH);                                             \
    m.impl("cross_entropy_fwd_inplace", &ce_fwd_inplace_##DISPATCH);                             \
    m.impl("cross_entropy_bwd", &ce_bwd_##DISPATCH);                                             \
    m.impl("cross_entropy_scale_grad_", &ce_scale_##DISPATCH);                                   \
    m.impl("cross_entropy_scale_grad", &ce_scaled_##DISPATCH);                                   \
  }
