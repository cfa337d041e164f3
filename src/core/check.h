// Building the error messages of the validation layer: "<op>: argument '<arg>': expected ..., got
// ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tigon/backends.h"
#include "tigon/dtype.h"
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

// numel of a contiguous tensor (any number of dimensions; non-null data unless empty), else an
// error naming `arg`.
std::int64_t contiguous_numel(std::string_view op, std::string_view arg, const TensorView& t);

// The checks every op makes of its tensors, with the same messages everywhere.

// dtype is float32, float16 or bfloat16 (an out-of-range enum value is reported by its code).
inline void check_floating(std::string_view op, std::string_view arg, DType got) {
  const int v = static_cast<int>(got);
  TIGON_CHECK_ARG(v >= 0 && v <= 2, op, arg, "dtype float32, float16 or bfloat16",
                  "dtype code " + std::to_string(v), ErrorCode::kTypeError);
}

// got == expected; `note` (e.g. " (cos's dtype)") follows the expected dtype in the message.
inline void check_dtype(std::string_view op, std::string_view arg, DType got, DType expected,
                        std::string_view note = {}) {
  TIGON_CHECK_ARG(got == expected, op, arg,
                  std::string("dtype ") + dtype_name(expected) + std::string(note), dtype_name(got),
                  ErrorCode::kTypeError);
}

// `t` is on `device`, which is `whose` (e.g. "x's device").
inline void check_device(std::string_view op, std::string_view arg, const TensorView& t,
                         Device device, std::string_view whose) {
  TIGON_CHECK_ARG(t.device == device, op, arg,
                  "a tensor on " + device_string(device) + " (" + std::string(whose) + ")",
                  device_string(t.device));
}

// A tensor on `device` can run: the CPU always, CUDA only in a build with the CUDA backend.
inline void check_backend(std::string_view op, std::string_view arg, Device device) {
  TIGON_CHECK_ARG(device.type == DeviceType::kCPU || has_cuda_backend(), op, arg,
                  "a CPU tensor (this build of tigon has no CUDA backend)",
                  "a tensor on " + device_string(device), ErrorCode::kBackendUnavailable);
}

// `ws` holds at least the `needed` bytes that the op's `query` (its workspace_size function) said.
inline void check_workspace(std::string_view op, Workspace ws, std::size_t needed,
                            std::string_view query) {
  TIGON_CHECK_ARG(ws.bytes >= needed && (needed == 0 || ws.data != nullptr), op, "workspace",
                  "at least " + std::to_string(needed) + " bytes (" + std::string(query) + ")",
                  std::to_string(ws.bytes) + " bytes");
}

}  // namespace tigon::detail
