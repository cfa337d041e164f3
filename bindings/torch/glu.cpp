// SwiGLU / GeGLU operators: schemas, the kernels (one per op for every device, cuda_context.h)
// and the composites.
#include "glu.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <torch/library.h>

#include <string>

#include "autograd.h"
#include "convert.h"
#include "cuda_context.h"
#include "unobservable.h"

namespace tigon::torch_binding {

GluNames glu_names(GluActivation act) {
  if (act == GluActivation::kSilu) {
    return {"swiglu_fwd",        "swiglu_bwd",           "swiglu_bwd_inplace",
            "swiglu_packed_fwd", "swiglu_down_proj_fwd", "swiglu_packed_down_proj_fwd"};
  }
  return {"geglu_fwd",        "geglu_bwd",           "geglu_bwd_inplace",
          "geglu_packed_fwd", "geglu_down_proj_fwd", "geglu_packed_down_proj_fwd"};
}

std::pair<at::Tensor, at::Tensor> glu_halves(const at::Tensor& gate_up, const char* op) {
  TORCH_CHECK_VALUE(
      gate_up.dim() > 0 && gate_up.size(-1) % 2 == 0,
      argument_message(op, "gate_up", "an even last dimension ([..., 2 * N]: gate then up)",
                       "shape " + int_list(gate_up.sizes())));
  const int64_t n = gate_up.size(-1) / 2;
  return {gate_up.narrow(-1, 0, n), gate_up.narrow(-1, n, n)};
}

at::Tensor call_glu_fwd(GluActivation act, const at::Tensor& a, const at::Tensor& b,
                        double gate_multiplier, double down_multiplier) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, bool, double, double);
  static const auto swiglu = op<Signature>("tigon::swiglu_fwd");
  static const auto geglu = op<Signature>("tigon::geglu_fwd");
  return (act == GluActivation::kSilu ? swiglu : geglu)
      .call(a, b, false, gate_multiplier, down_multiplier);
}

namespace {

// dy in a's dtype (a gradient arriving in another dtype is converted, as autograd would).
at::Tensor grad_like(const at::Tensor& dy, const at::Tensor& a) {
  return with_row_layout(dy.scalar_type() == a.scalar_type() ? dy : dy.to(a.scalar_type()));
}

// tigon::<act>_fwd; in_place is only read by the autograd kernel (glu_autograd.cpp).
template <GluActivation kAct>
at::Tensor glu_fwd(const at::Tensor& a_arg, const at::Tensor& b_arg, bool /*in_place*/,
                   double gate_multiplier, double down_multiplier) {
  const CudaContext context(a_arg);
  const char* op = glu_names(kAct).fwd;
  return translate_errors([&] {
    const at::Tensor a = with_row_layout(a_arg);
    const at::Tensor b = with_row_layout(b_arg);
    const TensorView av = to_view(a, op, "a");
    const TensorView bv = to_view(b, op, "b");
    at::Tensor y = at::empty(a.sizes(), a.options());
    tigon::glu_fwd(kAct, av, bv, to_view(y, op, "y"), {gate_multiplier, down_multiplier},
                   context.stream);
    return y;
  });
}

template <GluActivation kAct>
std::tuple<at::Tensor, at::Tensor> glu_bwd(const at::Tensor& dy_arg, const at::Tensor& a_arg,
                                           const at::Tensor& b_arg, double gate_multiplier,
                                           double down_multiplier) {
  const CudaContext context(a_arg);
  const char* op = glu_names(kAct).bwd;
  return translate_errors([&] {
    const at::Tensor a = with_row_layout(a_arg);
    const at::Tensor b = with_row_layout(b_arg);
    const at::Tensor dy = grad_like(dy_arg, a);
    at::Tensor da = at::empty(a.sizes(), a.options());
    at::Tensor db = at::empty(b.sizes(), b.options());
    tigon::glu_bwd(kAct, to_view(dy, op, "dy"), to_view(a, op, "a"), to_view(b, op, "b"),
                   to_view(da, op, "da"), to_view(db, op, "db"), {gate_multiplier, down_multiplier},
                   context.stream);
    return std::make_tuple(std::move(da), std::move(db));
  });
}

// tigon::<act>_bwd_inplace: da is written into a and db into b.
template <GluActivation kAct>
void glu_bwd_inplace(const at::Tensor& dy_arg, const at::Tensor& a, const at::Tensor& b,
                     double gate_multiplier, double down_multiplier) {
  const CudaContext context(a);
  const char* op = glu_names(kAct).bwd_inplace;
  for (const auto& [t, arg] : {std::pair<const at::Tensor&, const char*>{a, "a"}, {b, "b"}}) {
    TORCH_CHECK_VALUE(has_row_layout(t),
                      argument_message(op, arg,
                                       "unit stride in the last dimension and leading dimensions "
                                       "that collapse to one row stride (the gradient is written "
                                       "into it)",
                                       "strides " + int_list(t.strides())));
  }
  translate_errors([&] {
    const at::Tensor dy = grad_like(dy_arg, a);
    const TensorView av = to_view(a, op, "a");
    const TensorView bv = to_view(b, op, "b");
    tigon::glu_bwd(kAct, to_view(dy, op, "dy"), av, bv, av, bv, {gate_multiplier, down_multiplier},
                   context.stream);
  });
}

// The composites (in_place is only read by their autograd kernels).
template <GluActivation kAct>
at::Tensor packed_fwd(const at::Tensor& gate_up, bool /*in_place*/) {
  const auto [gate, up] = glu_halves(gate_up, glu_names(kAct).packed_fwd);
  return call_glu_fwd(kAct, gate, up);
}
template <GluActivation kAct>
at::Tensor down_proj_fwd(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias, bool /*in_place*/,
                         double gate_multiplier) {
  return at::linear(call_glu_fwd(kAct, gate, up, gate_multiplier), weight, bias);
}
template <GluActivation kAct>
at::Tensor packed_down_proj_fwd(const at::Tensor& gate_up, const at::Tensor& weight,
                                const std::optional<at::Tensor>& bias, bool /*in_place*/) {
  const auto [gate, up] = glu_halves(gate_up, glu_names(kAct).packed_down_proj_fwd);
  return at::linear(call_glu_fwd(kAct, gate, up), weight, bias);
}

void register_kernels(torch::Library& m) {
  constexpr GluActivation kSilu = GluActivation::kSilu;
  constexpr GluActivation kGelu = GluActivation::kGeluTanh;
  m.impl("swiglu_fwd", &glu_fwd<kSilu>);
  m.impl("swiglu_bwd", &glu_bwd<kSilu>);
  m.impl("swiglu_bwd_inplace", &glu_bwd_inplace<kSilu>);
  m.impl("geglu_fwd", &glu_fwd<kGelu>);
  m.impl("geglu_bwd", &glu_bwd<kGelu>);
  m.impl("geglu_bwd_inplace", &glu_bwd_inplace<kGelu>);
}

template <GluActivation kAct>
void register_composites(torch::Library& m) {
  const GluNames names = glu_names(kAct);
  m.impl(names.packed_fwd, &packed_fwd<kAct>);
  m.impl(names.down_proj_fwd, &down_proj_fwd<kAct>);
  m.impl(names.packed_down_proj_fwd, &packed_down_proj_fwd<kAct>);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernels in
  // glu_autograd.cpp.
  m.set_python_module("tigon.ops.glu");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  for (const char* name : {"swiglu", "geglu"}) {
    const std::string n = name;
    // gate_multiplier, down_multiplier: include/tigon/ops/glu.h (1, 1: the plain op).
    m.def((n + "_fwd(Tensor a, Tensor b, bool in_place=False, float gate_multiplier=1., "
               "float down_multiplier=1.) -> Tensor")
              .c_str(),
          tags);
    m.def((n + "_bwd(Tensor dy, Tensor a, Tensor b, float gate_multiplier=1., "
               "float down_multiplier=1.) -> (Tensor da, Tensor db)")
              .c_str(),
          tags);
    m.def((n + "_bwd_inplace(Tensor dy, Tensor(a!) a, Tensor(b!) b, float gate_multiplier=1., "
               "float down_multiplier=1.) -> ()")
              .c_str(),
          tags);
    // Composites of the ops above and aten ops (CompositeExplicitAutograd, any device), each
    // with its own autograd kernel: act(gate) * up with gate, up = gate_up.chunk(2, -1) (the
    // gradient of gate_up in one buffer), and F.linear(act(gate) * up, weight, bias) whose
    // backward recomputes the product instead of saving it.
    m.def((n + "_packed_fwd(Tensor gate_up, bool in_place=False) -> Tensor").c_str(), tags);
    m.def((n + "_down_proj_fwd(Tensor gate, Tensor up, Tensor weight, Tensor? bias, "
               "bool in_place=False, float gate_multiplier=1.) -> Tensor")
              .c_str(),
          tags);
    m.def((n + "_packed_down_proj_fwd(Tensor gate_up, Tensor weight, Tensor? bias, "
               "bool in_place=False) -> Tensor")
              .c_str(),
          tags);
  }
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("swiglu_bwd_inplace", tigon::torch_binding::bump_written_versions());
  m.impl("geglu_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif

TORCH_LIBRARY_IMPL(tigon, CompositeExplicitAutograd, m) {
  tigon::torch_binding::register_composites<tigon::GluActivation::kSilu>(m);
  tigon::torch_binding::register_composites<tigon::GluActivation::kGeluTanh>(m);
}
