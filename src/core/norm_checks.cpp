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

void check_hidden_vector(std::string_view op, std::string_view arg, const TensorView& t,
                         Device device, std::int64_t hidden) {
  check_device(op, arg, t, device, "x's device");
  TIGON_CHECK_ARG(t.ndim == 1 && t.sizes[0] == hidden, op, arg,
                  "shape [" + std::to_string(hidden) + "] (x's last dimension)", shape_string(t));
  TIGON_CHECK_ARG(hidden <= 1 || t.strides[0] == 1, op, arg, "a contiguous tensor",
                  "stride " + std::to_string(t.strides[0]));
  TIGON_CHECK_ARG(hidden == 0 || t.data != nullptr, op, arg, "a non-null data pointer", "nullptr");
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
