// The autograd kernels of the SwiGLU / GeGLU ops: <act>_fwd(a, b), <act>_packed_fwd(gate_up)
// and the down_proj forms <act>_down_proj_fwd / <act>_packed_down_proj_fwd.
//
// With in_place, a backward writes the activation's gradients into the saved inputs (a and b, or
// gate_up) when nothing else can observe them (unobservable.h): they are kept by
// save_inputs(), so the backward holds the last reference once autograd is done with them.
// Otherwise the gradients get new buffers (gate_up's: one buffer, a copy the kernel reads and
// overwrites). The down_proj forms save gate, up and the weight, not the product act(gate) * up
// (tokens x intermediate, the largest activation of a decoder layer), and recompute it in the
// backward; every result is produced by the same op on the same operands as autograd of
// F.linear (addmm / mm backward), so values and gradients are bitwise those of
// down_proj(<act>(gate, up)).
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "autograd.h"
#include "glu.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = Tensor(const Tensor&, const Tensor&, bool, double, double);
using PackedFwdSignature = Tensor(const Tensor&, bool);
using DownProjFwdSignature = Tensor(const Tensor&, const Tensor&, const Tensor&,
                                    const std::optional<Tensor>&, bool, double);
using PackedDownProjFwdSignature = Tensor(const Tensor&, const Tensor&,
                                          const std::optional<Tensor>&, bool);

std::string qualified(const char* name) { return std::string("tigon::") + name; }

// The gate / down multipliers of a call (include/tigon/ops/glu.h).
struct Multipliers {
  double gate = 1.0;
  double down = 1.0;
};

// <act>_bwd_inplace(dy, a, b) on buffers that are the caller's own (no version to bump).
template <GluActivation kAct>
void bwd_inplace(const Tensor& dy, const Tensor& a, const Tensor& b, Multipliers m = {}) {
  using Signature = void(const Tensor&, const Tensor&, const Tensor&, double, double);
  static const auto handle = op<Signature>(qualified(glu_names(kAct).bwd_inplace));
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  handle.call(dy, a, b, m.gate, m.down);
}

// da, db of <act>(a, b): into a and b when both may be overwritten, else new buffers.
template <GluActivation kAct>
std::pair<Tensor, Tensor> glu_grads(const Tensor& dy, Tensor a, Tensor b, bool in_place,
                                    Multipliers m = {}) {
  if (in_place && unobservable(a, a.scalar_type(), WriteLayout::kRows) &&
      unobservable(b, b.scalar_type(), WriteLayout::kRows)) {
    bwd_inplace<kAct>(dy, a, b, m);
    return {std::move(a), std::move(b)};
  }
  using Signature =
      std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, double, double);
  static const auto bwd = op<Signature>(qualified(glu_names(kAct).bwd));
  auto [da, db] = bwd.call(dy, a, b, m.gate, m.down);
  return {std::move(da), std::move(db)};
}

// The gradient of gate_up ([..., 2N]: gate then up) in one buffer: gate_up's own when it may be
// overwritten, else a contiguous copy (the kernel reads gate and up from the buffer it writes).
template <GluActivation kAct>
Tensor packed_grad(const Tensor& dy, Tensor gate_up, bool in_place) {
  Tensor grad = in_place && unobservable(gate_up, gate_up.scalar_type(), WriteLayout::kRows)
                    ? std::move(gate_up)
                    : gate_up.clone(at::MemoryFormat::Contiguous);
  const auto [gate, up] = glu_halves(grad, glu_names(kAct).packed_fwd);
  bwd_inplace<kAct>(dy.view(gate.sizes()), gate, up);
  return grad;
}

// (dh as [tokens, in_features], dweight, dbias) of F.linear(h, weight, bias) for the gradients
// asked for; h_of() recomputes h. Autograd's mm backward with mat2 = weight.t() (column-major)
// forms grad_mat2 as grad.t().mm(mat1).t() (then .t() back to weight's layout) and grad_mat1 as
// grad.mm(mat2.t()); the bias gradient is sum_to_size, a sum over the tokens.
template <typename H>
std::tuple<Tensor, Tensor, Tensor> linear_grads(const Tensor& dy, const H& h_of,
                                                const Tensor& weight, bool need_h, bool need_w,
                                                bool need_b) {
  const Tensor dy2 = dy.reshape({-1, dy.size(-1)});
  Tensor dh, dweight, dbias;
  if (need_w) dweight = dy2.t().mm(h_of().reshape({-1, weight.size(1)}));  // h: transient
  if (need_b) dbias = dy2.sum(0);
  if (need_h) dh = dy2.mm(weight);
  return {std::move(dh), std::move(dweight), std::move(dbias)};
}

template <GluActivation kAct>
struct GluFwd : torch::autograd::Function<GluFwd<kAct>> {
  static variable_list forward(AutogradContext* ctx, const Tensor& a, const Tensor& b,
                               bool in_place, double gate_multiplier, double down_multiplier) {
    static const auto fwd = op<FwdSignature>(qualified(glu_names(kAct).fwd));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor y = fwd.call(a, b, in_place, gate_multiplier, down_multiplier);
    ctx->saved_data["in_place"] = in_place;
    ctx->saved_data["gate_multiplier"] = gate_multiplier;
    ctx->saved_data["down_multiplier"] = down_multiplier;
    save_inputs(ctx, in_place, {a, b});
    return {y};
  }

  // grads by non-const reference: see unobservable.h.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list saved = saved_inputs(ctx);
    const Multipliers m{ctx->saved_data["gate_multiplier"].toDouble(),
                        ctx->saved_data["down_multiplier"].toDouble()};
    auto [da, db] = glu_grads<kAct>(grads[0], std::move(saved[0]), std::move(saved[1]),
                                    ctx->saved_data["in_place"].toBool(), m);
    return {std::move(da), std::move(db), Tensor(), Tensor(), Tensor()};
  }
};

template <GluActivation kAct>
struct GluPackedFwd : torch::autograd::Function<GluPackedFwd<kAct>> {
  static variable_list forward(AutogradContext* ctx, const Tensor& gate_up, bool in_place) {
    static const auto fwd = op<PackedFwdSignature>(qualified(glu_names(kAct).packed_fwd));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor y = fwd.call(gate_up, in_place);
    ctx->saved_data["in_place"] = in_place;
    save_inputs(ctx, in_place, {gate_up});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list saved = saved_inputs(ctx);
    return {packed_grad<kAct>(grads[0], std::move(saved[0]), ctx->saved_data["in_place"].toBool()),
            Tensor()};
  }
};

template <GluActivation kAct>
struct GluDownProjFwd : torch::autograd::Function<GluDownProjFwd<kAct>> {
  static variable_list forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up,
                               const Tensor& weight, const std::optional<Tensor>& bias,
                               bool in_place, double gate_multiplier) {
    static const auto fwd = op<DownProjFwdSignature>(qualified(glu_names(kAct).down_proj_fwd));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor y = fwd.call(gate, up, weight, bias, in_place, gate_multiplier);
    ctx->saved_data["in_place"] = in_place;
    ctx->saved_data["gate_multiplier"] = gate_multiplier;
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    save_inputs(ctx, in_place, {gate, up}, {weight});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list saved = saved_inputs(ctx);
    Tensor gate = std::move(saved[0]);
    Tensor up = std::move(saved[1]);
    const bool need_gate = ctx->needs_input_grad(0);
    const bool need_up = ctx->needs_input_grad(1);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const Multipliers m{ctx->saved_data["gate_multiplier"].toDouble(), 1.0};
    auto [dh, dweight, dbias] = linear_grads(
        grads[0], [&] { return call_glu_fwd(kAct, gate, up, m.gate); }, saved[2],
        need_gate || need_up, ctx->needs_input_grad(2), has_bias && ctx->needs_input_grad(3));
    variable_list out = {Tensor(),         Tensor(), std::move(dweight),
                         std::move(dbias), Tensor(), Tensor()};
    if (dh.defined()) {
      dh = dh.view(gate.sizes());
      auto [dgate, dup] = glu_grads<kAct>(dh, std::move(gate), std::move(up),
                                          ctx->saved_data["in_place"].toBool(), m);
      if (need_gate) out[0] = std::move(dgate);
      if (need_up) out[1] = std::move(dup);
    }
    return out;
  }
};

template <GluActivation kAct>
struct GluPackedDownProjFwd : torch::autograd::Function<GluPackedDownProjFwd<kAct>> {
  static variable_list forward(AutogradContext* ctx, const Tensor& gate_up, const Tensor& weight,
                               const std::optional<Tensor>& bias, bool in_place) {
    static const auto fwd =
        op<PackedDownProjFwdSignature>(qualified(glu_names(kAct).packed_down_proj_fwd));
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    Tensor y = fwd.call(gate_up, weight, bias, in_place);
    ctx->saved_data["in_place"] = in_place;
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    save_inputs(ctx, in_place, {gate_up}, {weight});
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list saved = saved_inputs(ctx);
    Tensor gate_up = std::move(saved[0]);
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    auto h_of = [&] {
      const auto [gate, up] = glu_halves(gate_up, glu_names(kAct).packed_down_proj_fwd);
      return call_glu_fwd(kAct, gate, up);
    };
    auto [dh, dweight, dbias] =
        linear_grads(grads[0], h_of, saved[1], ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                     has_bias && ctx->needs_input_grad(2));
    Tensor grad;
    if (dh.defined()) {
      grad = packed_grad<kAct>(dh, std::move(gate_up), ctx->saved_data["in_place"].toBool());
    }
    return {std::move(grad), std::move(dweight), std::move(dbias), Tensor()};
  }
};

template <GluActivation kAct>
void register_autograd(torch::Library& m) {
  const GluNames names = glu_names(kAct);
  m.impl(names.fwd, &AutogradKernel<GluFwd<kAct>, FwdSignature>::call);
  m.impl(names.packed_fwd, &AutogradKernel<GluPackedFwd<kAct>, PackedFwdSignature>::call);
  m.impl(names.down_proj_fwd, &AutogradKernel<GluDownProjFwd<kAct>, DownProjFwdSignature>::call);
  m.impl(names.packed_down_proj_fwd,
         &AutogradKernel<GluPackedDownProjFwd<kAct>, PackedDownProjFwdSignature>::call);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  tigon::torch_binding::register_autograd<tigon::GluActivation::kSilu>(m);
  tigon::torch_binding::register_autograd<tigon::GluActivation::kGeluTanh>(m);
}
