// SwiGLU / GeGLU operators: schemas, the shared implementation and the CPU registration.
#include "glu.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <string>

#include "convert.h"

namespace tigon::torch_binding {
namespace {

struct Names {
  const char* fwd;
  const char* bwd;
  const char* bwd_inplace;
};

Names names(GluActivation act) {
  if (act == GluActivation::kSilu) return {"swiglu_fwd", "swiglu_bwd", "swiglu_bwd_inplace"};
  return {"geglu_fwd", "geglu_bwd", "geglu_bwd_inplace"};
}

// dy in a's dtype (a gradient arriving in another dtype is converted, as autograd would).
at::Tensor grad_like(const at::Tensor& dy, const at::Tensor& a) {
  return with_row_layout(dy.scalar_type() == a.scalar_type() ? dy : dy.to(a.scalar_type()));
}

}  // namespace

at::Tensor glu_fwd(GluActivation act, const at::Tensor& a_arg, const at::Tensor& b_arg,
                   Stream stream) {
  const char* op = names(act).fwd;
  return translate_errors([&] {
    const at::Tensor a = with_row_layout(a_arg);
    const at::Tensor b = with_row_layout(b_arg);
    const TensorView av = to_view(a, op, "a");
    const TensorView bv = to_view(b, op, "b");
    at::Tensor y = at::empty(a.sizes(), a.options());
    tigon::glu_fwd(act, av, bv, to_view(y, op, "y"), stream);
    return y;
  });
}

std::tuple<at::Tensor, at::Tensor> glu_bwd(GluActivation act, const at::Tensor& dy_arg,
                                           const at::Tensor& a_arg, const at::Tensor& b_arg,
                                           Stream stream) {
  const char* op = names(act).bwd;
  return translate_errors([&] {
    const at::Tensor a = with_row_layout(a_arg);
    const at::Tensor b = with_row_layout(b_arg);
    const at::Tensor dy = grad_like(dy_arg, a);
    at::Tensor da = at::empty(a.sizes(), a.options());
    at::Tensor db = at::empty(b.sizes(), b.options());
    tigon::glu_bwd(act, to_view(dy, op, "dy"), to_view(a, op, "a"), to_view(b, op, "b"),
                   to_view(da, op, "da"), to_view(db, op, "db"), stream);
    return std::make_tuple(std::move(da), std::move(db));
  });
}

void glu_bwd_inplace(GluActivation act, const at::Tensor& dy_arg, const at::Tensor& a,
                     const at::Tensor& b, Stream stream) {
  const char* op = names(act).bwd_inplace;
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
    tigon::glu_bwd(act, to_view(dy, op, "dy"), av, bv, av, bv, stream);
  });
}

}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations and the autograd formulas live in this Python module.
  m.set_python_module("tigon.ops.glu");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  for (const char* name : {"swiglu", "geglu"}) {
    const std::string n = name;
    m.def((n + "_fwd(Tensor a, Tensor b, bool in_place=False) -> Tensor").c_str(), tags);
    m.def((n + "_bwd(Tensor dy, Tensor a, Tensor b) -> (Tensor da, Tensor db)").c_str(), tags);
    m.def((n + "_bwd_inplace(Tensor dy, Tensor(a!) a, Tensor(b!) b) -> ()").c_str(), tags);
  }
}

namespace {

using tigon::GluActivation;
using tigon::Stream;
namespace tb = tigon::torch_binding;

template <GluActivation kAct>
at::Tensor fwd_cpu(const at::Tensor& a, const at::Tensor& b, bool /*in_place*/) {
  return tb::glu_fwd(kAct, a, b, Stream{});
}
template <GluActivation kAct>
std::tuple<at::Tensor, at::Tensor> bwd_cpu(const at::Tensor& dy, const at::Tensor& a,
                                           const at::Tensor& b) {
  return tb::glu_bwd(kAct, dy, a, b, Stream{});
}
template <GluActivation kAct>
void bwd_inplace_cpu(const at::Tensor& dy, const at::Tensor& a, const at::Tensor& b) {
  tb::glu_bwd_inplace(kAct, dy, a, b, Stream{});
}

}  // namespace

TORCH_LIBRARY_IMPL(tigon, CPU, m) {
  m.impl("swiglu_fwd", &fwd_cpu<GluActivation::kSilu>);
  m.impl("swiglu_bwd", &bwd_cpu<GluActivation::kSilu>);
  m.impl("swiglu_bwd_inplace", &bwd_inplace_cpu<GluActivation::kSilu>);
  m.impl("geglu_fwd", &fwd_cpu<GluActivation::kGeluTanh>);
  m.impl("geglu_bwd", &bwd_cpu<GluActivation::kGeluTanh>);
  m.impl("geglu_bwd_inplace", &bwd_inplace_cpu<GluActivation::kGeluTanh>);
}
