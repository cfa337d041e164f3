// Mixture-of-experts experts operators: schemas and kernels (one per op for every device,
// cuda_context.h).
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>

#include "convert.h"
#include "cuda_context.h"
#include "norm_buffers.h"
#include "tigon/ops/moe_experts.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "moe_experts_fwd";
constexpr const char* kBwd = "moe_experts_bwd";

MoeExpertsParams params_of(std::string_view activation, std::string_view op) {
  MoeExpertsParams p;
  if (activation == "silu") {
    p.activation = GluActivation::kSilu;
  } else if (activation == "gelu_tanh") {
    p.activation = GluActivation::kGeluTanh;
  } else {
    TORCH_CHECK_VALUE(false, argument_message(op, "activation", "'silu' or 'gelu_tanh'",
                                              "'" + std::string(activation) + "'"));
  }
  return p;
}

MoeExpertsInputs inputs_of(const at::Tensor& hidden, const at::Tensor& ids,
                           const at::Tensor& weights, const at::Tensor& w_gate_up,
                           const at::Tensor& w_down, const char* op) {
  return {to_view(hidden, op, "hidden"), to_view(ids, op, "topk_ids"),
          to_view(weights, op, "topk_weights"), to_view(w_gate_up, op, "w_gate_up"),
          to_view(w_down, op, "w_down")};
}

// (out, expert_offsets, sorted_slots, gate_up, expert_out); with save false the last two are
// empty [0] tensors (a forward without backward).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> moe_experts_fwd(
    const at::Tensor& hidden_arg, const at::Tensor& topk_ids, const at::Tensor& topk_weights,
    const at::Tensor& w_gate_up_arg, const at::Tensor& w_down_arg, std::string_view activation,
    bool save) {
  const CudaContext context(hidden_arg);
  return translate_errors([&] {
    const MoeExpertsParams params = params_of(activation, kFwd);
    const at::Tensor hidden = with_row_layout(hidden_arg);
    const at::Tensor ids = topk_ids.contiguous(), weights = topk_weights.contiguous();
    const at::Tensor w_gate_up = w_gate_up_arg.contiguous(), w_down = w_down_arg.contiguous();
    const MoeExpertsInputs in = inputs_of(hidden, ids, weights, w_gate_up, w_down, kFwd);
    // The size query validates every input first (the shapes below are then known good).
    const std::size_t workspace_bytes = moe_experts_fwd_workspace_size(params, in, save);
    const int64_t n = hidden.size(0), h = hidden.size(1), slots = ids.numel();
    const int64_t experts = w_gate_up.size(0), i2 = w_gate_up.size(1);
    at::Tensor out = at::empty({n, h}, hidden.options());
    at::Tensor offsets = at::empty({experts + 1}, hidden.options().dtype(at::kLong));
    at::Tensor sorted = at::empty({slots}, hidden.options().dtype(at::kLong));
    at::Tensor gate_up = at::empty({save ? slots : 0, save ? i2 : 0}, hidden.options());
    at::Tensor expert_out = at::empty({save ? slots : 0, save ? h : 0}, hidden.options());
    const at::Tensor workspace = empty_bytes(workspace_bytes, hidden);
    const MoeExpertsSaved saved = save ? MoeExpertsSaved{to_view(gate_up, kFwd, "gate_up"),
                                                         to_view(expert_out, kFwd, "expert_out")}
                                       : MoeExpertsSaved{};
    tigon::moe_experts_fwd(
        params, in,
        {to_view(offsets, kFwd, "expert_offsets"), to_view(sorted, kFwd, "sorted_slots")}, saved,
        to_view(out, kFwd, "out"), to_workspace(workspace), context.stream);
    return std::make_tuple(std::move(out), std::move(offsets), std::move(sorted),
                           std::move(gate_up), std::move(expert_out));
  });
}

// (grad_hidden, grad_topk_weights, grad_w_gate_up, grad_w_down); an output output_mask leaves
// out is an empty [0] tensor.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> moe_experts_bwd(
    const at::Tensor& grad_out_arg, const at::Tensor& hidden_arg, const at::Tensor& topk_ids,
    const at::Tensor& topk_weights, const at::Tensor& w_gate_up_arg, const at::Tensor& w_down_arg,
    const at::Tensor& expert_offsets, const at::Tensor& sorted_slots, const at::Tensor& gate_up,
    const at::Tensor& expert_out, std::string_view activation, std::array<bool, 4> output_mask) {
  const CudaContext context(hidden_arg);
  return translate_errors([&] {
    const MoeExpertsParams params = params_of(activation, kBwd);
    const at::Tensor hidden = with_row_layout(hidden_arg);
    const at::Tensor grad_out = grad_out_arg.contiguous();
    const at::Tensor ids = topk_ids.contiguous(), weights = topk_weights.contiguous();
    const at::Tensor w_gate_up = w_gate_up_arg.contiguous(), w_down = w_down_arg.contiguous();
    const MoeExpertsInputs in = inputs_of(hidden, ids, weights, w_gate_up, w_down, kBwd);
    const std::size_t workspace_bytes = moe_experts_bwd_workspace_size(params, in, {});
    const auto empty_or = [&](bool wanted, const at::Tensor& like) {
      return wanted ? at::empty(like.sizes(), like.options()) : at::empty({0}, like.options());
    };
    at::Tensor d_hidden = empty_or(output_mask[0], grad_out);
    at::Tensor d_weights = empty_or(output_mask[1], weights);
    at::Tensor d_gate_up = empty_or(output_mask[2], w_gate_up);
    at::Tensor d_down = empty_or(output_mask[3], w_down);
    const MoeExpertsGrads grads{
        output_mask[0] ? to_view(d_hidden, kBwd, "grad_hidden") : TensorView{},
        output_mask[1] ? to_view(d_weights, kBwd, "grad_topk_weights") : TensorView{},
        output_mask[2] ? to_view(d_gate_up, kBwd, "grad_w_gate_up") : TensorView{},
        output_mask[3] ? to_view(d_down, kBwd, "grad_w_down") : TensorView{}};
    const at::Tensor workspace = empty_bytes(workspace_bytes, hidden);
    tigon::moe_experts_bwd(
        params, in,
        {to_view(expert_offsets, kBwd, "expert_offsets"),
         to_view(sorted_slots, kBwd, "sorted_slots")},
        {to_view(gate_up, kBwd, "gate_up"), to_view(expert_out, kBwd, "expert_out")},
        to_view(grad_out, kBwd, "grad_out"), grads, to_workspace(workspace), context.stream);
    return std::make_tuple(std::move(d_hidden), std::move(d_weights), std::move(d_gate_up),
                           std::move(d_down));
  });
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &moe_experts_fwd);
  m.impl(kBwd, &moe_experts_bwd);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // moe_experts_autograd.cpp.
  m.set_python_module("tigon.ops.moe_experts");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "moe_experts_fwd(Tensor hidden, Tensor topk_ids, Tensor topk_weights, Tensor w_gate_up, "
      "Tensor w_down, str activation, bool save) -> (Tensor out, Tensor expert_offsets, "
      "Tensor sorted_slots, Tensor gate_up, Tensor expert_out)",
      tags);
  m.def(
      "moe_experts_bwd(Tensor grad_out, Tensor hidden, Tensor topk_ids, Tensor topk_weights, "
      "Tensor w_gate_up, Tensor w_down, Tensor expert_offsets, Tensor sorted_slots, "
      "Tensor gate_up, Tensor expert_out, str activation, bool[4] output_mask) -> "
      "(Tensor grad_hidden, Tensor grad_topk_weights, Tensor grad_w_gate_up, Tensor grad_w_down)",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
