// The autograd kernel of tigon::rope_fwd. With in_place, the backward writes dq and dk into the
// incoming gradients when nothing else can observe them (unobservable.h), else into new buffers.
// Gradients of cos and sin (HF's tables never need them) are computed with plain torch ops.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/cat.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <utility>

#include "autograd.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                const Tensor&, int64_t, bool);
using BwdSignature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&,
                                                const Tensor&, int64_t, at::ScalarType);
using BwdInplaceSignature = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 int64_t);

// HF's rotate_half: cat(-x[..., half:], x[..., :half]).
Tensor rotate_half(const Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.narrow(-1, half, x.size(-1) - half).neg(), x.narrow(-1, 0, half)}, -1);
}

// d/dcos and d/dsin of q_embed = q * cos + rotate_half(q) * sin (and k's), summed over the
// dimensions cos was broadcast along (eager reduction order, not bitwise HF's).
std::pair<Tensor, Tensor> table_grads(const Tensor& dq_embed, const Tensor& dk_embed,
                                      const Tensor& q, const Tensor& k, const Tensor& cos,
                                      const Tensor& sin, int64_t unsqueeze_dim) {
  const std::vector<int64_t> shape = cos.unsqueeze(unsqueeze_dim).sizes().vec();
  const int64_t rotary = cos.size(-1);
  Tensor dcos, dsin;
  for (const auto& [dy, x] : {std::pair{&dq_embed, &q}, std::pair{&dk_embed, &k}}) {
    const Tensor dy_rot = dy->narrow(-1, 0, rotary);
    const Tensor x_rot = x->narrow(-1, 0, rotary);
    Tensor term_cos = dy_rot.mul(x_rot).sum_to_size(shape);
    Tensor term_sin = dy_rot.mul(rotate_half(x_rot)).sum_to_size(shape);
    dcos = dcos.defined() ? dcos.add(term_cos) : std::move(term_cos);
    dsin = dsin.defined() ? dsin.add(term_sin) : std::move(term_sin);
  }
  return {dcos.reshape(cos.sizes()).to(cos.scalar_type()),
          dsin.reshape(sin.sizes()).to(sin.scalar_type())};
}

struct RopeFwd : torch::autograd::Function<RopeFwd> {
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k,
                               const Tensor& cos, const Tensor& sin, int64_t unsqueeze_dim,
                               bool in_place) {
    static const auto fwd = op<FwdSignature>("tigon::rope_fwd");
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [q_embed, k_embed] = fwd.call(q, k, cos, sin, unsqueeze_dim, in_place);
    ctx->saved_data["unsqueeze_dim"] = unsqueeze_dim;
    ctx->saved_data["in_place"] = in_place;
    ctx->saved_data["dtype"] = q.scalar_type();
    // q and k are kept only for cos / sin gradients.
    const bool table_grad = cos.requires_grad() || sin.requires_grad();
    ctx->save_for_backward({cos, sin, table_grad ? q : Tensor(), table_grad ? k : Tensor()});
    return {q_embed, k_embed};
  }

  // grads by non-const reference: see unobservable.h. An unused output's gradient arrives as
  // zeros (materialized by autograd).
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(6);  // q, k, cos, sin, unsqueeze_dim, in_place
    Tensor dq_embed = std::move(grads[0]);
    Tensor dk_embed = std::move(grads[1]);
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& cos = saved[0];
    const Tensor& sin = saved[1];
    const int64_t unsqueeze_dim = ctx->saved_data["unsqueeze_dim"].toInt();
    const at::ScalarType dtype = ctx->saved_data["dtype"].toScalarType();
    if (ctx->needs_input_grad(2) || ctx->needs_input_grad(3)) {  // before dq_embed is reused
      std::tie(out[2], out[3]) =
          table_grads(dq_embed, dk_embed, saved[2], saved[3], cos, sin, unsqueeze_dim);
    }
    if (ctx->saved_data["in_place"].toBool() &&
        unobservable(dq_embed, dtype, WriteLayout::kDense) &&
        unobservable(dk_embed, dtype, WriteLayout::kDense)) {
      static const auto bwd_inplace = op<BwdInplaceSignature>("tigon::rope_bwd_inplace");
      at::AutoDispatchBelowADInplaceOrView below_autograd;  // the gradients are ours
      bwd_inplace.call(dq_embed, dk_embed, cos, sin, unsqueeze_dim);
      out[0] = std::move(dq_embed);
      out[1] = std::move(dk_embed);
    } else {
      static const auto bwd = op<BwdSignature>("tigon::rope_bwd");
      std::tie(out[0], out[1]) = bwd.call(dq_embed, dk_embed, cos, sin, unsqueeze_dim, dtype);
    }
    return out;
  }
};

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_IMPL(tigon, Autograd, m) {
  namespace tb = tigon::torch_binding;
  m.impl("rope_fwd", &tb::AutogradKernel<tb::RopeFwd, tb::FwdSignature>::call);
}
