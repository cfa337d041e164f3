// The in-place rule of every tigon autograd kernel, written once: an op writes into a buffer it did
// not allocate (an incoming gradient, a saved forward input) only when nothing else can observe
// that buffer, decided at run time the way autograd's AccumulateGrad decides that it may adopt a
// gradient instead of copying it. An op's `in_place` argument is a permission; this check is what
// makes it safe, so defaults may allow it.
//
// How a backward uses it (bindings/torch/<op>_autograd.cpp):
// - an incoming gradient: declare `static variable_list backward(AutogradContext*,
//   variable_list& grads)` (a non-const reference: torch's CppNode::apply moves the engine's
//   gradients into that list, so after `Tensor dy = std::move(grads[0])` dy's use count is 1 unless
//   someone else holds it). If a future torch passes an rvalue, this fails to compile instead of
//   silently keeping a second reference.
// - a saved forward input: save it with save_inputs() and take it back with saved_inputs().
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

namespace tigon::torch_binding {

// Fake or functional tensors (torch.compile is tracing), or a tensor subclass with Python dispatch
// (DTensor): who else holds such a tensor's data is not visible from here.
bool traced(const at::Tensor& t);

// The layout a kernel needs to write a tensor in place.
enum class WriteLayout {
  kRows,   // unit stride in the last dimension, rows of one stride (has_row_layout)
  kDense,  // any strides, every element at its own address (non-overlapping and dense)
};

// Whether an op may overwrite `t`: t is defined, strided, of `dtype`, writable in `layout`, not
// traced, does not require grad, autograd is not recording (a create_graph backward), t is not a
// view, nothing but the caller holds t (TensorImpl use count 1, or 2 with a Python wrapper only t
// itself references, as torch::autograd::impl::is_tensor_stealable), no other tensor shares its
// storage (storage use count 1), and it is not held by a CUDA-graph cache.
bool unobservable(const at::Tensor& t, at::ScalarType dtype, WriteLayout layout);

// Saves forward inputs for a backward that may overwrite them with their gradients: `inputs`
// (with in_place) in ctx->saved_data with their versions, not with save_for_backward, whose
// SavedVariable holds a reference the backward cannot release; `others` (never overwritten) with
// save_for_backward. Everything goes to save_for_backward without in_place, while saved-tensor
// hooks are active (activation checkpointing, offloading: they must see every saved tensor), or
// for inference tensors (no version counter).
void save_inputs(torch::autograd::AutogradContext* ctx, bool in_place,
                 const torch::autograd::variable_list& inputs,
                 const torch::autograd::variable_list& others = {});

// (inputs..., others...) as save_inputs() saved them, checked as autograd checks saved tensors
// (an error if one was modified in place since the forward, or already released by a backward).
// Unless the graph is kept for another backward (retain_graph), the context's references to the
// inputs are released, so unobservable() on them tells whether the caller may write into them.
// The inputs come without autograd metadata: they may be returned as gradients.
torch::autograd::variable_list saved_inputs(torch::autograd::AutogradContext* ctx);

// The ADInplaceOrView kernel of every op that writes into an argument marked (a!) in its schema:
// bumps the version counters of the written tensors, so that autograd rejects a saved tensor the
// op overwrote ("modified by an inplace operation") instead of silently using the new values.
// The autograd kernels call such ops below ADInplaceOrView on buffers that are theirs.
torch::CppFunction bump_written_versions();

}  // namespace tigon::torch_binding
