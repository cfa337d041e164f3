// Building the error messages of the validation layer: "<op>: argument '<arg>': expected ..., got
// ...".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tigon/error.h"
#include "tigon/tensor.h"

namespace tigon::detail {

std::string shape_string(const TensorView& t);
std::string device_string(Device d);

[[noreturn]] void throw_argument_error(ErrorCode code, std::string_view op, std::string_view arg,
                                       std::string_view expected, std::string_view got);

[[noreturn]] inline void throw_argument_error(std::string_view op, std::string_view arg,
                                              std::string_view expected, std::string_view got,
                                              ErrorCode code = ErrorCode::kInvalidArgument) {
  throw_argument_error(code, op, arg, expected, got);
}

// TIGON_CHECK_ARG(condition, op, arg, expected, got[, code]): the message arguments are evaluated
// only when the check fails, so passing checks cost no string building (host overhead per call).
#define TIGON_CHECK_ARG(condition, ...)                                   \
  do {                                                                    \
    if (!(condition)) ::tigon::detail::throw_argument_error(__VA_ARGS__); \
  } while (0)

// Rows of a [..., H] view: the leading dimensions must collapse into one stride.
struct RowLayout {
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  std::int64_t row_stride = 0;
};

// Validates that `t` is a floating tensor of the given device whose last dimension is contiguous
// and whose leading dimensions collapse to one row stride; names `arg` in every error.
RowLayout row_layout(std::string_view op, std::string_view arg, const TensorView& t);

}  // namespace tigon::detail
