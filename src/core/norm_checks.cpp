#include "core/norm_checks.h"

#include <string>

#include "core/check.h"

namespace tigon::detail {

void check_same_shape(std::string_view op, std::string_view arg, const TensorView& t,
                      const TensorView& ref, std::string_view ref_name) {
  bool same = t.ndim == ref.ndim;
  for (int d = 0; same && d < t.ndim; ++d) same = t.sizes[d] == ref.sizes[d];
  TIGON_CHECK_ARG(same, op, arg,
                  "shape " + shape_string(ref) + " (" + std::string(ref_name) + "'s shape)",
                  shape_string(t));
}

RowLayout checked_norm_input(std::string_view op, const TensorView& x, std::string_view x_name) {
  check_floating(op, x_name, x.dtype);
  const RowLayout layout = row_layout(op, x_name, x);
  TIGON_CHECK_ARG(layout.hidden > 0, op, x_name, "a last dimension (hidden size) >= 1",
                  shape_string(x));
  check_backend(op, x_name, x.device);
  return layout;
}

RowLayout checked_like(std::string_view op, std::string_view arg, const TensorView& t,
                       const TensorView& ref, DType dtype, std::string_view ref_name) {
  const std::string whose = std::string(ref_name) + "'s";
  check_device(op, arg, t, ref.device, whose + " device");
  check_dtype(op, arg, t.dtype, dtype, dtype == ref.dtype ? " (" + whose + " dtype)" : "");
  check_same_shape(op, arg, t, ref, ref_name);
  return row_layout(op, arg, t);
}

void check_parameter_dtype(std::string_view op, std::string_view arg, DType got, DType x_dtype) {
  TIGON_CHECK_ARG(got == x_dtype || got == DType::kFloat32, op, arg,
                  std::string("dtype ") + dtype_name(x_dtype) + " (x's) or float32",
                  dtype_name(got), ErrorCode::kTypeError);
}

void check_scalar_parameter(std::string_view op, std::string_view arg, const TensorView& t,
                            Device device, DType dtype) {
  check_device(op, arg, t, device, "x's device");
  check_dtype(op, arg, t.dtype, dtype);
  std::int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.sizes[d];
  TIGON_CHECK_ARG(n == 1 && t.data != nullptr, op, arg, "a tensor of one element", shape_string(t));
}

void check_hidden_vector(std::string_view op, std::string_view arg, const TensorView& t,
                         Device device, std::int64_t hidden) {
  check_parameter_vector(op, arg, t, device, hidden, "x's last dimension");
}

void check_parameter_vector(std::string_view op, std::string_view arg, const TensorView& t,
                            Device device, std::int64_t n, std::string_view what) {
  check_device(op, arg, t, device, "x's device");
  TIGON_CHECK_ARG(t.ndim == 1 && t.sizes[0] == n, op, arg,
                  "shape [" + std::to_string(n) + "] (" + std::string(what) + ")", shape_string(t));
  TIGON_CHECK_ARG(n <= 1 || t.strides[0] == 1, op, arg, "a contiguous tensor",
                  "stride " + std::to_string(t.strides[0]));
  TIGON_CHECK_ARG(n == 0 || t.data != nullptr, op, arg, "a non-null data pointer", "nullptr");
}

void check_row_statistic(std::string_view op, std::string_view arg, const TensorView& t,
                         Device device, std::int64_t rows) {
  check_device(op, arg, t, device, "x's device");
  check_dtype(op, arg, t.dtype, DType::kFloat32);
  std::int64_t numel = 1;
  bool contiguous = true;
  std::int64_t expected_stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    numel *= t.sizes[d];
    if (t.sizes[d] != 1 && t.strides[d] != expected_stride) contiguous = false;
    expected_stride *= t.sizes[d];
  }
  TIGON_CHECK_ARG(
      numel == rows && (contiguous || numel == 0), op, arg,
      "a contiguous float32 tensor of " + std::to_string(rows) + " elements (one per row)",
      shape_string(t) + (contiguous ? "" : " (not contiguous)"));
  TIGON_CHECK_ARG(rows == 0 || t.data != nullptr, op, arg, "a non-null data pointer", "nullptr");
}

}  // namespace tigon::detail
