// SwiGLU / GeGLU: the one validation point, then dispatch to a backend.
#include "tigon/ops/glu.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "ops/glu_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::check_floating;

struct OpNames {
  const char* fwd;
  const char* bwd;
};

OpNames op_names(GluActivation act) {
  return act == GluActivation::kSilu ? OpNames{"swiglu_fwd", "swiglu_bwd"}
                                     : OpNames{"geglu_fwd", "geglu_bwd"};
}

void check_activation(const char* op, GluActivation act) {
  const int v = static_cast<int>(act);
  TIGON_CHECK_ARG(v >= 0 && v <= 1, op, "activation", "kSilu or kGeluTanh", std::to_string(v));
}

// A multiplier as the backends take it: finite, and finite once rounded to float32.
float checked_multiplier(const char* op, const char* arg, double m) {
  const float f = static_cast<float>(m);
  TIGON_CHECK_ARG(std::isfinite(m) && std::isfinite(f), op, arg,
                  "a finite value (finite in float32, |m| < 3.4e38)", std::to_string(m));
  return f;
}

// `t` is like `a` (the reference): same dtype, device and sizes. Returns its row layout.
detail::RowLayout checked_like_a(const char* op, const char* arg, const TensorView& t,
                                 const TensorView& a) {
  check_floating(op, arg, t.dtype);
  TIGON_CHECK_ARG(t.dtype == a.dtype, op, arg,
                  std::string("dtype ") + dtype_name(a.dtype) + " (a's dtype)", dtype_name(t.dtype),
                  ErrorCode::kTypeError);
  TIGON_CHECK_ARG(t.device == a.device, op, arg,
                  "a tensor on " + detail::device_string(a.device) + " (a's device)",
                  detail::device_string(t.device));
  bool same = t.ndim == a.ndim;
  for (int d = 0; same && d < t.ndim; ++d) same = t.sizes[d] == a.sizes[d];
  TIGON_CHECK_ARG(same, op, arg, "shape " + detail::shape_string(a) + " (a's shape)",
                  detail::shape_string(t));
  return detail::row_layout(op, arg, t);
}

detail::RowLayout checked_a(const char* op, const TensorView& a) {
  check_floating(op, "a", a.dtype);
  const detail::RowLayout layout = detail::row_layout(op, "a", a);
  detail::check_backend(op, "a", a.device);
  return layout;
}

// A tensor as the aliasing checks see it.
struct Region {
  const void* data;
  detail::RowLayout layout;
};

// True when two views of elements of `bytes` bytes share no element: disjoint byte ranges, or
// the same row stride with column ranges that interleave without meeting (the gate and up halves
// of one gate_up buffer).
bool disjoint(const Region& x, const Region& y, std::size_t bytes) {
  auto span_end = [&](const Region& r) {
    return reinterpret_cast<std::uintptr_t>(r.data) +
           static_cast<std::uintptr_t>((r.layout.rows - 1) * r.layout.row_stride +
                                       r.layout.hidden) *
               bytes;
  };
  const auto xs = reinterpret_cast<std::uintptr_t>(x.data);
  const auto ys = reinterpret_cast<std::uintptr_t>(y.data);
  if (span_end(x) <= ys || span_end(y) <= xs) return true;
  const std::int64_t stride = x.layout.row_stride;
  if (x.layout.rows != y.layout.rows || y.layout.row_stride != stride) return false;
  const Region& lo = xs <= ys ? x : y;
  const Region& hi = xs <= ys ? y : x;
  const std::uintptr_t gap =
      reinterpret_cast<std::uintptr_t>(hi.data) - reinterpret_cast<std::uintptr_t>(lo.data);
  if (gap % bytes != 0) return false;
  const std::int64_t column = static_cast<std::int64_t>(gap / bytes) % stride;
  return column >= lo.layout.hidden && column + hi.layout.hidden <= stride;
}

// An output is either `self` exactly (same pointer and row stride: written in place) or shares
// no element with it; it never shares an element with any tensor in `others`.
void check_output(const char* op, const char* arg, const Region& out, DType dtype,
                  const Region* self, const char* self_name, std::initializer_list<Region> others) {
  const std::size_t bytes = element_size(dtype);
  if (self != nullptr && out.data == self->data) {
    TIGON_CHECK_ARG(
        out.layout.row_stride == self->layout.row_stride || out.layout.rows == 1, op, arg,
        std::string("the same row stride as ") + self_name + " when written in place into it",
        std::to_string(out.layout.row_stride) + " vs " + std::to_string(self->layout.row_stride));
  } else if (self != nullptr) {
    TIGON_CHECK_ARG(disjoint(out, *self, bytes), op, arg,
                    std::string("either ") + self_name + " itself (in place) or no overlap with it",
                    "a partially overlapping view");
  }
  for (const Region& other : others) {
    TIGON_CHECK_ARG(disjoint(out, other, bytes), op, arg,
                    "no overlap with the other tensors of the call", "an overlapping view");
  }
}

// The view is dense: its rows follow each other with no gap.
bool dense(const detail::RowLayout& l) { return l.rows <= 1 || l.row_stride == l.hidden; }

}  // namespace

const char* glu_activation_name(GluActivation activation) noexcept {
  switch (activation) {
    case GluActivation::kSilu: return "silu";
    case GluActivation::kGeluTanh: return "gelu_tanh";
  }
  return "unknown";
}

void glu_fwd(GluActivation act, const TensorView& a, const TensorView& b, const TensorView& y,
             Stream stream) {
  glu_fwd(act, a, b, y, GluMultipliers{}, stream);
}

void glu_fwd(GluActivation act, const TensorView& a, const TensorView& b, const TensorView& y,
             const GluMultipliers& multipliers, Stream stream) {
  const char* op = op_names(act).fwd;
  check_activation(op, act);
  const float gm = checked_multiplier(op, "gate_multiplier", multipliers.gate);
  const float dm = checked_multiplier(op, "down_multiplier", multipliers.down);
  const detail::RowLayout al = checked_a(op, a);
  const detail::RowLayout bl = checked_like_a(op, "b", b, a);
  const detail::RowLayout yl = checked_like_a(op, "y", y, a);
  if (al.rows == 0 || al.hidden == 0) return;
  check_output(op, "y", {y.data, yl}, a.dtype, nullptr, nullptr, {{a.data, al}, {b.data, bl}});

  detail::GluFwdArgs args;
  args.activation = act;
  args.dtype = a.dtype;
  args.rows = al.rows;
  args.width = al.hidden;
  args.a = a.data;
  args.a_row_stride = al.row_stride;
  args.b = b.data;
  args.b_row_stride = bl.row_stride;
  args.y = y.data;
  args.y_row_stride = yl.row_stride;
  args.gate_multiplier = gm;
  args.down_multiplier = dm;
  if (dense(al) && dense(bl) && dense(yl)) {  // one long row: no per-row tails
    args.width = al.rows * al.hidden;
    args.rows = 1;
  }
  if (a.device.type == DeviceType::kCUDA) {
    cuda::glu_fwd(args, a.device.index, stream.cuda_stream);
  } else {
    cpu::glu_fwd(args);
  }
}

void glu_bwd(GluActivation act, const TensorView& dy, const TensorView& a, const TensorView& b,
             const TensorView& da, const TensorView& db, Stream stream) {
  glu_bwd(act, dy, a, b, da, db, GluMultipliers{}, stream);
}

void glu_bwd(GluActivation act, const TensorView& dy, const TensorView& a, const TensorView& b,
             const TensorView& da, const TensorView& db, const GluMultipliers& multipliers,
             Stream stream) {
  const char* op = op_names(act).bwd;
  check_activation(op, act);
  const float gm = checked_multiplier(op, "gate_multiplier", multipliers.gate);
  const float dm = checked_multiplier(op, "down_multiplier", multipliers.down);
  const detail::RowLayout al = checked_a(op, a);
  const detail::RowLayout bl = checked_like_a(op, "b", b, a);
  const detail::RowLayout dyl = checked_like_a(op, "dy", dy, a);
  const detail::RowLayout dal = checked_like_a(op, "da", da, a);
  const detail::RowLayout dbl = checked_like_a(op, "db", db, a);
  if (al.rows == 0 || al.hidden == 0) return;
  const Region ra{a.data, al}, rb{b.data, bl}, rdy{dy.data, dyl}, rda{da.data, dal},
      rdb{db.data, dbl};
  check_output(op, "da", rda, a.dtype, &ra, "a", {rb, rdy, rdb});
  check_output(op, "db", rdb, a.dtype, &rb, "b", {ra, rdy});

  detail::GluBwdArgs args;
  args.activation = act;
  args.dtype = a.dtype;
  args.rows = al.rows;
  args.width = al.hidden;
  args.dy = dy.data;
  args.dy_row_stride = dyl.row_stride;
  args.a = a.data;
  args.a_row_stride = al.row_stride;
  args.b = b.data;
  args.b_row_stride = bl.row_stride;
  args.da = da.data;
  args.da_row_stride = dal.row_stride;
  args.db = db.data;
  args.db_row_stride = dbl.row_stride;
  args.gate_multiplier = gm;
  args.down_multiplier = dm;
  if (dense(al) && dense(bl) && dense(dyl) && dense(dal) && dense(dbl)) {
    args.width = al.rows * al.hidden;
    args.rows = 1;
  }
  if (a.device.type == DeviceType::kCUDA) {
    cuda::glu_bwd(args, a.device.index, stream.cuda_stream);
  } else {
    cpu::glu_bwd(args);
  }
}

void swiglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y, Stream stream) {
  glu_fwd(GluActivation::kSilu, a, b, y, stream);
}
void swiglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b,
                const TensorView& da, const TensorView& db, Stream stream) {
  glu_bwd(GluActivation::kSilu, dy, a, b, da, db, stream);
}
void geglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y, Stream stream) {
  glu_fwd(GluActivation::kGeluTanh, a, b, y, stream);
}
void geglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b, const TensorView& da,
               const TensorView& db, Stream stream) {
  glu_bwd(GluActivation::kGeluTanh, dy, a, b, da, db, stream);
}
void swiglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y,
                const GluMultipliers& multipliers, Stream stream) {
  glu_fwd(GluActivation::kSilu, a, b, y, multipliers, stream);
}
void swiglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b,
                const TensorView& da, const TensorView& db, const GluMultipliers& multipliers,
                Stream stream) {
  glu_bwd(GluActivation::kSilu, dy, a, b, da, db, multipliers, stream);
}
void geglu_fwd(const TensorView& a, const TensorView& b, const TensorView& y,
               const GluMultipliers& multipliers, Stream stream) {
  glu_fwd(GluActivation::kGeluTanh, a, b, y, multipliers, stream);
}
void geglu_bwd(const TensorView& dy, const TensorView& a, const TensorView& b, const TensorView& da,
               const TensorView& db, const GluMultipliers& multipliers, Stream stream) {
  glu_bwd(GluActivation::kGeluTanh, dy, a, b, da, db, multipliers, stream);
}

}  // namespace tigon
