// RoPE: the one validation point, then dispatch to a backend.
#include "tigon/ops/rope.h"

#include <string>

#include "core/check.h"
#include "ops/rope_args.h"
#include "tigon/backends.h"

namespace tigon {
namespace {

using detail::check_dtype;
using detail::check_floating;

constexpr const char* kFwd = "rope_fwd";
constexpr const char* kBwd = "rope_bwd";

std::int64_t numel(const TensorView& t) {
  std::int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.sizes[d];
  return n;
}

// 4 dimensions, non-negative sizes and strides, a data pointer when not empty.
void check_4d(const char* op, const char* arg, const TensorView& t, const char* layout) {
  TIGON_CHECK_ARG(t.ndim == 4, op, arg, std::string("a 4-D tensor ") + layout,
                  std::to_string(t.ndim) + " dimensions " + detail::shape_string(t));
  for (int d = 0; d < 4; ++d) {
    TIGON_CHECK_ARG(t.sizes[d] >= 0 && t.strides[d] >= 0, op, arg, "non-negative sizes and strides",
                    "sizes " + detail::shape_string(t) + ", stride " +
                        std::to_string(t.strides[d]) + " in dimension " + std::to_string(d));
  }
  TIGON_CHECK_ARG(numel(t) == 0 || t.data != nullptr, op, arg, "a non-null data pointer",
                  "nullptr");
}

void check_device(const char* op, const char* arg, const TensorView& t, Device device) {
  detail::check_device(op, arg, t, device, "the first input's device");
}

// The byte range [first, last] an (assumed non-empty) view can touch.
struct Extent {
  std::uintptr_t first = 0, last = 0;
};
Extent extent(const TensorView& t) {
  std::int64_t span = 0;
  for (int d = 0; d < t.ndim; ++d) span += (t.sizes[d] - 1) * t.strides[d];
  const auto first = reinterpret_cast<std::uintptr_t>(t.data);
  return {first, first + static_cast<std::uintptr_t>((span + 1) * element_size(t.dtype)) - 1};
}

struct Shared {
  const TensorView& cos;
  const TensorView& sin;
  std::int64_t rotary_dim;
  DType in_dtype;   // q / k (forward), dy (backward)
  DType out_dtype;  // y (forward), dx (backward)
  Device device;
};

// One of (q, y_q), (k, y_k), (dy_q, dx_q), (dy_k, dx_k). Returns false when there is nothing to
// do (no rows).
bool fill_tensor(const char* op, const char* in_name, const char* out_name, const TensorView& in,
                 const TensorView& out, const Shared& s, bool backward, detail::RopeTensor& r) {
  check_4d(op, in_name, in, "[N0, N1, N2, D] (e.g. [batch, heads, seq, head_dim])");
  check_device(op, in_name, in, s.device);
  check_dtype(op, in_name, in.dtype, s.in_dtype,
              backward ? " (rope_output_dtype of dx's dtype and cos's dtype)" : " (q's dtype)");
  TIGON_CHECK_ARG(in.sizes[3] >= s.rotary_dim, op, in_name,
                  "a last dimension >= the rotary dim " + std::to_string(s.rotary_dim) +
                      " (cos's last dimension)",
                  detail::shape_string(in));
  for (int d = 0; d < 3; ++d) {
    for (const TensorView* c : {&s.cos, &s.sin}) {
      TIGON_CHECK_ARG(c->sizes[d] == 1 || c->sizes[d] == in.sizes[d], op,
                      c == &s.cos ? "cos" : "sin",
                      "a shape that broadcasts to " + std::string(in_name) + "'s " +
                          detail::shape_string(in) + " (size 1 or " + std::to_string(in.sizes[d]) +
                          " in dimension " + std::to_string(d) + ")",
                      detail::shape_string(*c));
    }
  }
  check_4d(op, out_name, out, "with the input's shape");
  check_device(op, out_name, out, s.device);
  check_dtype(op, out_name, out.dtype, s.out_dtype,
              backward ? " (q's dtype)" : " (rope_output_dtype of q's and cos's dtypes)");
  bool same_shape = true;
  for (int d = 0; d < 4; ++d) same_shape = same_shape && out.sizes[d] == in.sizes[d];
  TIGON_CHECK_ARG(same_shape, op, out_name,
                  "shape " + detail::shape_string(in) + " (" + in_name + "'s shape)",
                  detail::shape_string(out));
  if (numel(in) == 0) return false;

  // Every element of the output is written by one thread: no two may share an address.
  for (int d = 0; d < 4; ++d) {
    TIGON_CHECK_ARG(out.sizes[d] == 1 || out.strides[d] != 0, op, out_name,
                    "a view without repeated elements (stride 0 in a dimension of size > 1)",
                    "stride 0 in dimension " + std::to_string(d));
  }
  const bool in_place = out.data == in.data;
  if (in_place) {
    bool same_strides = true;
    for (int d = 0; d < 4; ++d) same_strides = same_strides && out.strides[d] == in.strides[d];
    TIGON_CHECK_ARG(same_strides && out.dtype == in.dtype, op, out_name,
                    std::string("the strides and dtype of ") + in_name +
                        " when written in place (same data pointer)",
                    "a different layout or dtype");
  } else {
    const Extent a = extent(in), b = extent(out);
    TIGON_CHECK_ARG(
        a.last < b.first || b.last < a.first, op, out_name,
        std::string("memory disjoint from ") + in_name + " (or exactly the same view: in place)",
        "an overlapping view");
  }

  r.in = in.data;
  r.out = out.data;
  for (int d = 0; d < 3; ++d) r.sizes[d] = in.sizes[d];
  r.dim = in.sizes[3];
  for (int d = 0; d < 4; ++d) {
    r.in_strides[d] = in.sizes[d] == 1 ? 0 : in.strides[d];
    r.out_strides[d] = out.sizes[d] == 1 ? 0 : out.strides[d];
  }
  r.write_pass = backward || !in_place;
  return true;
}

void run(const char* op, bool backward, const TensorView& in_q, const TensorView& in_k,
         const TensorView& cos, const TensorView& sin, const TensorView& out_q,
         const TensorView& out_k, Stream stream) {
  const char* in_q_name = backward ? "dy_q" : "q";
  const char* in_k_name = backward ? "dy_k" : "k";
  const char* out_q_name = backward ? "dx_q" : "y_q";
  const char* out_k_name = backward ? "dx_k" : "y_k";

  check_floating(op, in_q_name, in_q.dtype);
  detail::check_backend(op, in_q_name, in_q.device);
  const Device device = in_q.device;
  check_floating(op, "cos", cos.dtype);
  check_4d(op, "cos", cos, "[C0, C1, C2, R] broadcasting to q (e.g. [batch or 1, 1, seq, R])");
  check_device(op, "cos", cos, device);
  const std::int64_t rotary_dim = cos.sizes[3];
  TIGON_CHECK_ARG(rotary_dim >= 2 && rotary_dim % 2 == 0, op, "cos",
                  "an even last dimension >= 2 (the rotary dim)", detail::shape_string(cos));
  check_floating(op, "sin", sin.dtype);
  check_4d(op, "sin", sin, "[C0, C1, C2, R] broadcasting to q (cos's last dimension)");
  check_device(op, "sin", sin, device);
  check_dtype(op, "sin", sin.dtype, cos.dtype, " (cos's dtype)");
  TIGON_CHECK_ARG(sin.sizes[3] == rotary_dim, op, "sin",
                  "last dimension " + std::to_string(rotary_dim) + " (cos's last dimension)",
                  detail::shape_string(sin));

  check_floating(op, out_q_name, out_q.dtype);
  const DType x_dtype = backward ? out_q.dtype : in_q.dtype;
  const DType y_dtype = rope_output_dtype(x_dtype, cos.dtype);
  const Shared shared{
      cos, sin, rotary_dim, backward ? y_dtype : x_dtype, backward ? x_dtype : y_dtype, device};

  detail::RopeArgs a;
  a.backward = backward;
  a.rotary_dim = rotary_dim;
  a.x_dtype = x_dtype;
  a.cos_dtype = cos.dtype;
  if (fill_tensor(op, in_q_name, out_q_name, in_q, out_q, shared, backward, a.tensors[a.count])) {
    ++a.count;
  }
  TIGON_CHECK_ARG(in_k.defined() == out_k.defined(), op, out_k_name,
                  std::string("a tensor exactly when ") + in_k_name + " is given",
                  out_k.defined() ? "a tensor" : "none");
  if (in_k.defined() &&
      fill_tensor(op, in_k_name, out_k_name, in_k, out_k, shared, backward, a.tensors[a.count])) {
    ++a.count;
  }
  if (a.count == 0) return;
  TIGON_CHECK_ARG(numel(cos) > 0 && numel(sin) > 0, op, numel(cos) > 0 ? "sin" : "cos",
                  "a non-empty tensor (the inputs are not empty)", "no elements");

  a.cos = cos.data;
  a.sin = sin.data;
  for (int d = 0; d < 4; ++d) {
    a.cos_strides[d] = cos.sizes[d] == 1 ? 0 : cos.strides[d];
    a.sin_strides[d] = sin.sizes[d] == 1 ? 0 : sin.strides[d];
  }
  if (device.type == DeviceType::kCUDA) {
    cuda::rope(a, device.index, stream.cuda_stream);
  } else {
    cpu::rope(a);
  }
}

}  // namespace

DType rope_output_dtype(DType x_dtype, DType cos_dtype) noexcept {
  return promote_types(x_dtype, cos_dtype);
}

void rope_fwd(const TensorView& q, const TensorView& k, const TensorView& cos,
              const TensorView& sin, const TensorView& y_q, const TensorView& y_k, Stream stream) {
  run(kFwd, false, q, k, cos, sin, y_q, y_k, stream);
}

void rope_bwd(const TensorView& dy_q, const TensorView& dy_k, const TensorView& cos,
              const TensorView& sin, const TensorView& dx_q, const TensorView& dx_k,
              Stream stream) {
  run(kBwd, true, dy_q, dy_k, cos, sin, dx_q, dx_k, stream);
}

}  // namespace tigon
