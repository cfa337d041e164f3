// Shared by the autograd kernels of cross-entropy and fused linear cross-entropy
// (cross_entropy_autograd.cpp, fused_linear_cross_entropy_autograd.cpp): the gradients their
// forward computes for upstream gradient 1, handed to the backward and scaled there.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>

namespace tigon::torch_binding {

// Keeps `grad` in ctx->saved_data under `key` by reference, not with save_for_backward, so that
// the tensor the backward returns is the only reference and the leaf's AccumulateGrad adopts it
// as .grad without a copy.
void stash_forward_grad(torch::autograd::AutogradContext* ctx, const char* key,
                        const at::Tensor& grad);

// The gradient stashed under `key` times grad_loss (one element, read on the device): scaled in
// place (a no-op for upstream 1) when nothing else can observe it (unobservable.h), else into a
// new buffer (torch.compile is tracing, or a direct caller of the op still holds the gradient
// output). The stash is emptied: a second backward through the graph is refused.
at::Tensor scaled_forward_grad(torch::autograd::AutogradContext* ctx, const char* key,
                               const at::Tensor& grad_loss);

}  // namespace tigon::torch_binding
