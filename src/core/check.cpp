#include "core/check.h"

namespace tigon::detail {

std::string shape_string(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d) s += (d ? ", " : "") + std::to_string(t.sizes[d]);
  return s + "]";
}

std::string device_string(Device d) {
  return d.type == DeviceType::kCPU ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

void throw_argument_error(ErrorCode code, std::string_view op, std::string_view arg,
                          std::string_view expected, std::string_view got) {
  std::string message = "tigon::";
  message.append(op).append(": argument '").append(arg).append("': expected ");
  message.append(expected).append(", got ").append(got);
  throw Error(code, message);
}

RowLayout row_layout(std::string_view op, std::string_view arg, const TensorView& t) {
  TIGON_CHECK_ARG(t.ndim >= 1 && t.ndim <= TensorView::kMaxDims, op, arg,
                  "a tensor with 1 to 8 dimensions", std::to_string(t.ndim) + " dimensions");
  for (int d = 0; d < t.ndim; ++d) {
    TIGON_CHECK_ARG(t.sizes[d] >= 0, op, arg, "non-negative sizes", shape_string(t));
  }
  RowLayout layout;
  layout.hidden = t.sizes[t.ndim - 1];
  layout.rows = 1;
  for (int d = 0; d < t.ndim - 1; ++d) layout.rows *= t.sizes[d];
  if (layout.rows == 0 || layout.hidden == 0) return layout;
  TIGON_CHECK_ARG(layout.hidden == 1 || t.strides[t.ndim - 1] == 1, op, arg,
                  "unit stride in the last dimension",
                  "stride " + std::to_string(t.strides[t.ndim - 1]));
  TIGON_CHECK_ARG(t.data != nullptr, op, arg, "a non-null data pointer", "nullptr");
  // Collapse leading dims: walking inwards, each size-1 dim is free, others must nest exactly.
  std::int64_t stride = -1;
  std::int64_t span = 1;  // elements covered by one step of the current collapsed row index
  for (int d = t.ndim - 2; d >= 0; --d) {
    if (t.sizes[d] == 1) continue;
    if (stride < 0) {
      stride = t.strides[d];
      span = t.sizes[d];
      continue;
    }
    TIGON_CHECK_ARG(
        t.strides[d] == stride * span, op, arg,
        "leading dimensions that collapse to one row stride (a row-strided or contiguous view)",
        "sizes " + shape_string(t) + " with stride " + std::to_string(t.strides[d]) +
            " in dimension " + std::to_string(d));
    span *= t.sizes[d];
  }
  layout.row_stride = stride < 0 ? layout.hidden : stride;
  TIGON_CHECK_ARG(layout.rows == 1 || layout.row_stride >= layout.hidden, op, arg,
                  "rows that do not overlap (row stride >= hidden size)",
                  "row stride " + std::to_string(layout.row_stride));
  return layout;
}

std::int64_t contiguous_numel(std::string_view op, std::string_view arg, const TensorView& t) {
  std::int64_t numel = 1, expected = 1;
  bool contiguous = true;
  for (int d = t.ndim - 1; d >= 0; --d) {
    numel *= t.sizes[d];
    if (t.sizes[d] != 1 && t.strides[d] != expected) contiguous = false;
    expected *= t.sizes[d];
  }
  TIGON_CHECK_ARG(contiguous || numel == 0, op, arg, "a contiguous tensor",
                  shape_string(t) + " (not contiguous)");
  TIGON_CHECK_ARG(numel == 0 || t.data != nullptr, op, arg, "a non-null data pointer", "nullptr");
  return numel;
}

}  // namespace tigon::detail
