// Mixture-of-experts experts: the one validation point, then dispatch to a backend.
#include "tigon/ops/moe_experts.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "ops/moe_experts_args.h"

namespace tigon {
namespace {

using detail::MoeExpertsShape;
using detail::MoeExpertsTensors;

constexpr const char* kOp = "moe_experts";

std::string shape_of(std::initializer_list<std::int64_t> sizes) {
  std::string s = "shape [";
  bool first = true;
  for (const std::int64_t v : sizes) {
    if (!first) s += ", ";
    s += std::to_string(v);
    first = false;
  }
  return s + "]";
}

bool has_shape(const TensorView& t, std::initializer_list<std::int64_t> sizes) {
  if (t.ndim != static_cast<int>(sizes.size())) return false;
  int d = 0;
  for (const std::int64_t v : sizes)
    if (t.sizes[d++] != v) return false;
  return true;
}

// A contiguous tensor of the given shape and dtype on `device`.
void check_tensor(const char* arg, const TensorView& t, std::initializer_list<std::int64_t> sizes,
                  Device device) {
  detail::check_device(kOp, arg, t, device, "hidden's device");
  TIGON_CHECK_ARG(has_shape(t, sizes), kOp, arg, shape_of(sizes), detail::shape_string(t));
  detail::contiguous_numel(kOp, arg, t);
}

void check_dtype_of(const char* arg, DType got, DType a, DType b, const std::string& what) {
  TIGON_CHECK_ARG(got == a || got == b, kOp, arg, what, dtype_name(got), ErrorCode::kTypeError);
}

struct Checked {
  MoeExpertsShape shape;
  MoeExpertsTensors t;
  Device device;
};

Checked checked(const MoeExpertsParams& params, const MoeExpertsInputs& in) {
  Checked c;
  MoeExpertsShape& s = c.shape;
  const TensorView& h = in.hidden;
  TIGON_CHECK_ARG(h.ndim == 2, kOp, "hidden", "a [N, H] tensor", detail::shape_string(h));
  detail::check_floating(kOp, "hidden", h.dtype);
  const detail::RowLayout hl = detail::row_layout(kOp, "hidden", h);
  TIGON_CHECK_ARG(hl.hidden >= 1, kOp, "hidden", "H >= 1", detail::shape_string(h));
  c.device = h.device;
  detail::check_backend(kOp, "hidden", c.device);
  TIGON_CHECK_ARG(
      params.activation == GluActivation::kSilu || params.activation == GluActivation::kGeluTanh,
      kOp, "activation", "silu or gelu_tanh",
      "code " + std::to_string(static_cast<int>(params.activation)));
  s.activation = params.activation;
  s.dtype = h.dtype;
  s.tokens = hl.rows;
  s.hidden = hl.hidden;

  const TensorView& w1 = in.w_gate_up;
  TIGON_CHECK_ARG(w1.ndim == 3 && w1.sizes[0] >= 1 && w1.sizes[1] >= 2 && w1.sizes[1] % 2 == 0 &&
                      w1.sizes[2] == s.hidden,
                  kOp, "w_gate_up",
                  "a [E, 2I, " + std::to_string(s.hidden) + "] tensor (E, I >= 1)",
                  detail::shape_string(w1));
  s.experts = w1.sizes[0];
  s.intermediate = w1.sizes[1] / 2;
  check_tensor("w_gate_up", w1, {s.experts, 2 * s.intermediate, s.hidden}, c.device);
  detail::check_dtype(kOp, "w_gate_up", w1.dtype, s.dtype, " (hidden's dtype)");
  check_tensor("w_down", in.w_down, {s.experts, s.hidden, s.intermediate}, c.device);
  detail::check_dtype(kOp, "w_down", in.w_down.dtype, s.dtype, " (hidden's dtype)");

  const TensorView& ids = in.topk_ids;
  TIGON_CHECK_ARG(ids.ndim == 2 && ids.sizes[0] == s.tokens && ids.sizes[1] >= 1, kOp, "topk_ids",
                  "a [" + std::to_string(s.tokens) + ", K] tensor (K >= 1)",
                  detail::shape_string(ids));
  s.top_k = ids.sizes[1];
  check_tensor("topk_ids", ids, {s.tokens, s.top_k}, c.device);
  detail::check_dtype(kOp, "topk_ids", ids.dtype, DType::kInt64);
  check_tensor("topk_weights", in.topk_weights, {s.tokens, s.top_k}, c.device);
  check_dtype_of("topk_weights", in.topk_weights.dtype, DType::kFloat32, s.dtype,
                 std::string("dtype float32 or ") + dtype_name(s.dtype) + " (hidden's dtype)");
  s.weight_dtype = in.topk_weights.dtype;

  c.t.hidden = h.data;
  c.t.hidden_row_stride = hl.row_stride;
  c.t.topk_ids = static_cast<const std::int64_t*>(ids.data);
  c.t.topk_weights = in.topk_weights.data;
  c.t.w_gate_up = w1.data;
  c.t.w_down = in.w_down.data;
  // Expert ids are data: checked where they are readable without a synchronization (the CPU).
  if (c.device.type == DeviceType::kCPU) {
    for (std::int64_t p = 0; p < s.slots(); ++p) {
      const std::int64_t e = c.t.topk_ids[p];
      TIGON_CHECK_ARG(e >= 0 && e <= s.experts, kOp, "topk_ids",
                      "expert ids in [0, " + std::to_string(s.experts) + "] (E: a dropped slot)",
                      std::to_string(e) + " at slot " + std::to_string(p));
    }
  }
  return c;
}

void set_routing(Checked& c, const MoeExpertsRouting& r) {
  const MoeExpertsShape& s = c.shape;
  check_tensor("expert_offsets", r.expert_offsets, {s.experts + 1}, c.device);
  detail::check_dtype(kOp, "expert_offsets", r.expert_offsets.dtype, DType::kInt64);
  check_tensor("sorted_slots", r.sorted_slots, {s.slots()}, c.device);
  detail::check_dtype(kOp, "sorted_slots", r.sorted_slots.dtype, DType::kInt64);
  c.t.expert_offsets = static_cast<std::int64_t*>(r.expert_offsets.data);
  c.t.sorted_slots = static_cast<std::int64_t*>(r.sorted_slots.data);
}

void set_saved(Checked& c, const MoeExpertsSaved& saved, bool required) {
  const MoeExpertsShape& s = c.shape;
  const bool any = saved.gate_up.defined() || saved.expert_out.defined();
  if (!any && !required) return;
  const char* whose = " (hidden's dtype)";
  TIGON_CHECK_ARG(saved.gate_up.defined(), kOp, "saved.gate_up",
                  required ? "a tensor (the forward's)" : "a tensor when expert_out is saved",
                  "undefined");
  TIGON_CHECK_ARG(saved.expert_out.defined(), kOp, "saved.expert_out",
                  required ? "a tensor (the forward's)" : "a tensor when gate_up is saved",
                  "undefined");
  check_tensor("saved.gate_up", saved.gate_up, {s.slots(), 2 * s.intermediate}, c.device);
  detail::check_dtype(kOp, "saved.gate_up", saved.gate_up.dtype, s.dtype, whose);
  check_tensor("saved.expert_out", saved.expert_out, {s.slots(), s.hidden}, c.device);
  detail::check_dtype(kOp, "saved.expert_out", saved.expert_out.dtype, s.dtype, whose);
  c.t.saved_gate_up = saved.gate_up.data;
  c.t.saved_expert_out = saved.expert_out.data;
}

std::size_t fwd_workspace(const Checked& c, bool saving) {
  return c.device.type == DeviceType::kCUDA
             ? cuda::moe_experts_fwd_workspace_size(c.shape, saving, c.device.index)
             : cpu::moe_experts_fwd_workspace_size(c.shape, saving);
}

std::size_t bwd_workspace(const Checked& c) {
  return c.device.type == DeviceType::kCUDA
             ? cuda::moe_experts_bwd_workspace_size(c.shape, c.device.index)
             : cpu::moe_experts_bwd_workspace_size(c.shape);
}

}  // namespace

std::size_t moe_experts_fwd_workspace_size(const MoeExpertsParams& params,
                                           const MoeExpertsInputs& inputs, bool saving) {
  return fwd_workspace(checked(params, inputs), saving);
}

void moe_experts_fwd(const MoeExpertsParams& params, const MoeExpertsInputs& inputs,
                     const MoeExpertsRouting& routing, const MoeExpertsSaved& saved,
                     const TensorView& out, Workspace workspace, Stream stream) {
  Checked c = checked(params, inputs);
  set_routing(c, routing);
  set_saved(c, saved, false);
  check_tensor("out", out, {c.shape.tokens, c.shape.hidden}, c.device);
  detail::check_dtype(kOp, "out", out.dtype, c.shape.dtype, " (hidden's dtype)");
  detail::check_workspace(kOp, workspace, fwd_workspace(c, c.t.saved_gate_up != nullptr),
                          "moe_experts_fwd_workspace_size");
  detail::MoeExpertsFwdArgs a{c.shape, c.t, out.data, workspace.data, workspace.bytes};
  if (c.device.type == DeviceType::kCUDA) {
    cuda::moe_experts_fwd(a, c.device.index, stream.cuda_stream);
  } else {
    cpu::moe_experts_fwd(a);
  }
}

std::size_t moe_experts_bwd_workspace_size(const MoeExpertsParams& params,
                                           const MoeExpertsInputs& inputs,
                                           const MoeExpertsGrads& /*grads*/) {
  return bwd_workspace(checked(params, inputs));
}

void moe_experts_bwd(const MoeExpertsParams& params, const MoeExpertsInputs& inputs,
                     const MoeExpertsRouting& routing, const MoeExpertsSaved& saved,
                     const TensorView& grad_out, const MoeExpertsGrads& grads, Workspace workspace,
                     Stream stream) {
  Checked c = checked(params, inputs);
  set_routing(c, routing);
  set_saved(c, saved, true);
  const MoeExpertsShape& s = c.shape;
  const char* whose = " (hidden's dtype)";
  check_tensor("grad_out", grad_out, {s.tokens, s.hidden}, c.device);
  detail::check_dtype(kOp, "grad_out", grad_out.dtype, s.dtype, whose);
  detail::MoeExpertsBwdArgs a;
  a.shape = s;
  a.t = c.t;
  a.grad_out = grad_out.data;
  if (grads.hidden.defined()) {
    check_tensor("grad_hidden", grads.hidden, {s.tokens, s.hidden}, c.device);
    detail::check_dtype(kOp, "grad_hidden", grads.hidden.dtype, s.dtype, whose);
    a.grad_hidden = grads.hidden.data;
  }
  if (grads.topk_weights.defined()) {
    check_tensor("grad_topk_weights", grads.topk_weights, {s.tokens, s.top_k}, c.device);
    detail::check_dtype(kOp, "grad_topk_weights", grads.topk_weights.dtype, s.weight_dtype,
                        " (topk_weights' dtype)");
    a.grad_topk_weights = grads.topk_weights.data;
  }
  const std::string float_or_t =
      std::string("dtype float32 or ") + dtype_name(s.dtype) + " (hidden's dtype)";
  if (grads.w_gate_up.defined()) {
    check_tensor("grad_w_gate_up", grads.w_gate_up, {s.experts, 2 * s.intermediate, s.hidden},
                 c.device);
    check_dtype_of("grad_w_gate_up", grads.w_gate_up.dtype, DType::kFloat32, s.dtype, float_or_t);
    a.grad_w_gate_up = grads.w_gate_up.data;
    a.grad_w_gate_up_dtype = grads.w_gate_up.dtype;
  }
  if (grads.w_down.defined()) {
    check_tensor("grad_w_down", grads.w_down, {s.experts, s.hidden, s.intermediate}, c.device);
    check_dtype_of("grad_w_down", grads.w_down.dtype, DType::kFloat32, s.dtype, float_or_t);
    a.grad_w_down = grads.w_down.data;
    a.grad_w_down_dtype = grads.w_down.dtype;
  }
  detail::check_workspace(kOp, workspace, bwd_workspace(c), "moe_experts_bwd_workspace_size");
  a.workspace = workspace.data;
  a.workspace_bytes = workspace.bytes;
  if (c.device.type == DeviceType::kCUDA) {
    cuda::moe_experts_bwd(a, c.device.index, stream.cuda_stream);
  } else {
    cpu::moe_experts_bwd(a);
  }
}

}  // namespace tigon
