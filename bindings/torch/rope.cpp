// RoPE operators: schemas, HF's broadcasting of cos / sin mapped onto the core's 4-D views, and
// the kernels (one per op for every device, cuda_context.h).
// Arguments follow HF's apply_rotary_pos_emb: q [B, Hq, S, D] and k [B, Hkv, S, D] (or
// [B, S, H, D] with unsqueeze_dim=2, or 3-D without the batch: the vision towers' [S, H, D]),
// cos / sin [B | 1, S, R] or [S, R] unsqueezed at unsqueeze_dim and broadcast against q and k
// (the table forms of docs/ops/rope.md).
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

#include "convert.h"
#include "cuda_context.h"
#include "tigon/ops/rope.h"
#include "unobservable.h"

namespace tigon::torch_binding {
namespace {

constexpr const char* kFwd = "rope_fwd";
constexpr const char* kFwdInplace = "rope_fwd_inplace";
constexpr const char* kBwd = "rope_bwd";
constexpr const char* kBwdInplace = "rope_bwd_inplace";

// How HF-layout tensors map to the core's [N0, N1, N2, D]: left-pad to 4 dimensions, then move
// the dimension cos was unsqueezed at (the heads) to position 1, where the kernels order rows so
// that neighbouring heads of one token run together. The same view change applies to every
// operand, so the elementwise result is unchanged.
struct Canonical {
  int64_t heads_dim = 1;  // in the padded 4-D coordinates

  at::Tensor apply(const at::Tensor& t) const {
    at::Tensor v = t;
    while (v.dim() < 4) v = v.unsqueeze(0);
    return heads_dim == 1 ? v : v.transpose(heads_dim, 1);
  }
};

struct Operands {
  Canonical canonical;
  at::Tensor cos;  // unsqueezed and canonical
  at::Tensor sin;
  int64_t unsqueeze_dim = 1;  // as given
};

// HF's q * cos.unsqueeze(unsqueeze_dim): the unsqueezed table broadcasts against x, aligned on
// the right (the last dimension, the rotary dim, is the core's check). Checked here, in the
// caller's shapes, so that the message names them (the core sees the canonical 4-D views). Sizes
// only: no view is made.
void check_broadcast(const char* op, const at::Tensor& table, const char* table_name,
                     int64_t unsqueeze_dim, const at::Tensor& x, const char* x_name) {
  const int64_t rank = table.dim() + 1;  // after unsqueeze
  const int64_t u = unsqueeze_dim < 0 ? unsqueeze_dim + rank : unsqueeze_dim;
  const auto size = [&](int64_t d) {
    return d < u ? table.size(d) : d == u ? 1 : table.size(d - 1);
  };
  const int64_t offset = x.dim() - rank;  // >= 0: the table has fewer dimensions than x
  for (int64_t d = 0; d + 1 < rank; ++d) {
    const int64_t want = x.size(d + offset);
    if (size(d) == 1 || size(d) == want) continue;
    std::vector<int64_t> sizes(static_cast<size_t>(rank));
    for (int64_t e = 0; e < rank; ++e) sizes[static_cast<size_t>(e)] = size(e);
    std::string expected = std::string(table_name) + ".unsqueeze(" + std::to_string(unsqueeze_dim) +
                           ") " + int_list(sizes) + " that broadcasts to " + x_name + "'s " +
                           int_list(x.sizes()) + " as in HF (size 1 or " + std::to_string(want) +
                           " in dimension " + std::to_string(d + offset) + " of " + x_name + ")";
    if (table.dim() == 2 && x.dim() == 4 && u == 1) {
      expected += "; a [S, R] table with [B, H, S, D] " + std::string(x_name) +
                  " takes unsqueeze_dim=0 (unsqueeze_dim=1 puts S against dimension 1: [B, S, H, "
                  "D] or the vision towers' [S, H, D])";
    }
    TORCH_CHECK_VALUE(false, argument_message(op, table_name, expected,
                                              "size " + std::to_string(size(d)) + " there"));
  }
}

Operands operands(const char* op, const at::Tensor& x, const char* x_name, const at::Tensor& cos,
                  const at::Tensor& sin, int64_t unsqueeze_dim) {
  TORCH_CHECK_VALUE(x.dim() >= 2 && x.dim() <= 4,
                    argument_message(op, x_name, "a tensor with 2 to 4 dimensions ([B, H, S, D])",
                                     std::to_string(x.dim()) + " dimensions"));
  for (const auto& [t, name] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}}) {
    TORCH_CHECK_VALUE(
        t->dim() >= 1 && t->dim() < x.dim(),
        argument_message(op, name,
                         "a tensor with fewer dimensions than " + std::string(x_name) +
                             " ([B, S, R], [1, S, R] or [S, R])",
                         std::to_string(t->dim()) + " dimensions"));
  }
  TORCH_CHECK_VALUE(cos.dim() == sin.dim(),
                    argument_message(op, "sin", std::to_string(cos.dim()) + " dimensions (cos's)",
                                     std::to_string(sin.dim())));
  const int64_t rank = cos.dim() + 1;  // after unsqueeze
  TORCH_CHECK_VALUE(unsqueeze_dim >= -rank && unsqueeze_dim < rank,
                    argument_message(op, "unsqueeze_dim",
                                     "a dimension of cos.unsqueeze in [" + std::to_string(-rank) +
                                         ", " + std::to_string(rank - 1) + "]",
                                     std::to_string(unsqueeze_dim)));
  const int64_t u = unsqueeze_dim < 0 ? unsqueeze_dim + rank : unsqueeze_dim;
  TORCH_CHECK_VALUE(
      u < rank - 1,
      argument_message(op, "unsqueeze_dim", "a dimension before the last one (the heads dimension)",
                       std::to_string(unsqueeze_dim)));
  for (const auto& [t, name] : {std::pair{&cos, "cos"}, std::pair{&sin, "sin"}}) {
    check_broadcast(op, *t, name, unsqueeze_dim, x, x_name);
  }
  Operands o;
  o.unsqueeze_dim = unsqueeze_dim;
  o.canonical.heads_dim = u + (4 - rank);
  o.cos = o.canonical.apply(cos.unsqueeze(u));
  o.sin = o.canonical.apply(sin.unsqueeze(u));
  return o;
}

// k has q's rank, and cos and sin broadcast against it too (its own head count).
void check_second(const char* op, const Operands& o, const at::Tensor& cos, const at::Tensor& sin,
                  const at::Tensor& q, const at::Tensor& k, const char* k_name,
                  const char* q_name) {
  TORCH_CHECK_VALUE(
      k.dim() == q.dim(),
      argument_message(op, k_name, std::to_string(q.dim()) + " dimensions (" + q_name + "'s)",
                       std::to_string(k.dim()) + " dimensions"));
  check_broadcast(op, cos, "cos", o.unsqueeze_dim, k, k_name);
  check_broadcast(op, sin, "sin", o.unsqueeze_dim, k, k_name);
}

TensorView view(const at::Tensor& t, const char* op, const char* arg) {
  return to_view(t, op, arg);
}

// tigon::rope_fwd: outputs have q's / k's layout (empty_like) and dtype promote(q, cos). in_place
// is only read by the autograd kernel (rope_autograd.cpp).
std::tuple<at::Tensor, at::Tensor> rope_fwd(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& cos, const at::Tensor& sin,
                                            int64_t unsqueeze_dim, bool /*in_place*/) {
  const CudaContext context(q);
  const Operands o = operands(kFwd, q, "q", cos, sin, unsqueeze_dim);
  check_second(kFwd, o, cos, sin, q, k, "k", "q");
  return translate_errors([&] {
    const TensorView qv = view(o.canonical.apply(q), kFwd, "q");
    const TensorView cv = view(o.cos, kFwd, "cos");
    const at::ScalarType out = to_scalar_type(rope_output_dtype(qv.dtype, cv.dtype));
    at::Tensor q_embed = at::empty_like(q, q.options().dtype(out));
    at::Tensor k_embed = at::empty_like(k, k.options().dtype(out));
    tigon::rope_fwd(qv, view(o.canonical.apply(k), kFwd, "k"), cv, view(o.sin, kFwd, "sin"),
                    view(o.canonical.apply(q_embed), kFwd, "q_embed"),
                    view(o.canonical.apply(k_embed), kFwd, "k_embed"), context.stream);
    return std::make_tuple(std::move(q_embed), std::move(k_embed));
  });
}

// tigon::rope_fwd_inplace: needs promote(q, cos) == q's dtype.
void rope_fwd_inplace(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                      const at::Tensor& sin, int64_t unsqueeze_dim) {
  const CudaContext context(q);
  const Operands o = operands(kFwdInplace, q, "q", cos, sin, unsqueeze_dim);
  check_second(kFwdInplace, o, cos, sin, q, k, "k", "q");
  translate_errors([&] {
    const at::Tensor q4 = o.canonical.apply(q), k4 = o.canonical.apply(k);
    const TensorView qv = view(q4, kFwdInplace, "q");
    const TensorView cv = view(o.cos, kFwdInplace, "cos");
    const DType out = rope_output_dtype(qv.dtype, cv.dtype);
    TORCH_CHECK_TYPE(out == qv.dtype,
                     argument_message(kFwdInplace, "cos",
                                      std::string("dtype ") + dtype_name(qv.dtype) +
                                          " or float32 q (the result is written into q)",
                                      dtype_name(cv.dtype)));
    const TensorView kv = view(k4, kFwdInplace, "k");
    tigon::rope_fwd(qv, kv, cv, view(o.sin, kFwdInplace, "sin"), qv, kv, context.stream);
  });
}

// tigon::rope_bwd; dtype: q's (and k's) dtype.
std::tuple<at::Tensor, at::Tensor> rope_bwd(const at::Tensor& dq_embed, const at::Tensor& dk_embed,
                                            const at::Tensor& cos, const at::Tensor& sin,
                                            int64_t unsqueeze_dim, at::ScalarType dtype) {
  const CudaContext context(dq_embed);
  const Operands o = operands(kBwd, dq_embed, "dq_embed", cos, sin, unsqueeze_dim);
  check_second(kBwd, o, cos, sin, dq_embed, dk_embed, "dk_embed", "dq_embed");
  return translate_errors([&] {
    at::Tensor dq = at::empty_like(dq_embed, dq_embed.options().dtype(dtype));
    at::Tensor dk = at::empty_like(dk_embed, dk_embed.options().dtype(dtype));
    tigon::rope_bwd(view(o.canonical.apply(dq_embed), kBwd, "dq_embed"),
                    view(o.canonical.apply(dk_embed), kBwd, "dk_embed"), view(o.cos, kBwd, "cos"),
                    view(o.sin, kBwd, "sin"), view(o.canonical.apply(dq), kBwd, "dtype"),
                    view(o.canonical.apply(dk), kBwd, "dtype"), context.stream);
    return std::make_tuple(std::move(dq), std::move(dk));
  });
}

// tigon::rope_bwd_inplace: dq, dk are written into the gradients.
void rope_bwd_inplace(const at::Tensor& dq_embed, const at::Tensor& dk_embed, const at::Tensor& cos,
                      const at::Tensor& sin, int64_t unsqueeze_dim) {
  const CudaContext context(dq_embed);
  const Operands o = operands(kBwdInplace, dq_embed, "dq_embed", cos, sin, unsqueeze_dim);
  check_second(kBwdInplace, o, cos, sin, dq_embed, dk_embed, "dk_embed", "dq_embed");
  translate_errors([&] {
    const TensorView dq = view(o.canonical.apply(dq_embed), kBwdInplace, "dq_embed");
    const TensorView dk = view(o.canonical.apply(dk_embed), kBwdInplace, "dk_embed");
    tigon::rope_bwd(dq, dk, view(o.cos, kBwdInplace, "cos"), view(o.sin, kBwdInplace, "sin"), dq,
                    dk, context.stream);
  });
}

void register_kernels(torch::Library& m) {
  m.impl(kFwd, &rope_fwd);
  m.impl(kFwdInplace, &rope_fwd_inplace);
  m.impl(kBwd, &rope_bwd);
  m.impl(kBwdInplace, &rope_bwd_inplace);
}

}  // namespace
}  // namespace tigon::torch_binding

TORCH_LIBRARY_FRAGMENT(tigon, m) {
  // The fake (meta) implementations live in this Python module, the autograd kernel in
  // rope_autograd.cpp.
  m.set_python_module("tigon.ops.rope");
  const std::vector<at::Tag> tags = {at::Tag::pt2_compliant_tag};
  m.def(
      "rope_fwd(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim=1, "
      "bool in_place=False) -> (Tensor q_embed, Tensor k_embed)",
      tags);
  m.def(
      "rope_fwd_inplace(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, "
      "int unsqueeze_dim=1) -> ()",
      tags);
  m.def(
      "rope_bwd(Tensor dq_embed, Tensor dk_embed, Tensor cos, Tensor sin, int unsqueeze_dim, "
      "ScalarType dtype) -> (Tensor dq, Tensor dk)",
      tags);
  m.def(
      "rope_bwd_inplace(Tensor(a!) dq_embed, Tensor(b!) dk_embed, Tensor cos, Tensor sin, "
      "int unsqueeze_dim) -> ()",
      tags);
}

TORCH_LIBRARY_IMPL(tigon, ADInplaceOrView, m) {
  m.impl("rope_fwd_inplace", tigon::torch_binding::bump_written_versions());
  m.impl("rope_bwd_inplace", tigon::torch_binding::bump_written_versions());
}

TORCH_LIBRARY_IMPL(tigon, CPU, m) { tigon::torch_binding::register_kernels(m); }
#if defined(TIGON_TORCH_WITH_CUDA)
TORCH_LIBRARY_IMPL(tigon, CUDA, m) { tigon::torch_binding::register_kernels(m); }
#endif
