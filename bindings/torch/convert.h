// at::Tensor -> tigon::TensorView, option parsing and error translation shared by every op.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tigon/error.h"
#include "tigon/ops/cross_entropy.h"
#include "tigon/ops/rms_norm.h"
#include "tigon/tensor.h"

namespace tigon::torch_binding {

// "tigon::<op>: argument '<arg>': expected <expected>, got <got>", the core's message format.
std::string argument_message(std::string_view op, std::string_view arg, std::string_view expected,
                             std::string_view got);

// "[a, b, c]": sizes and strides for error messages.
std::string int_list(c10::IntArrayRef values);

// A view of `t` (strided, float32/float16/bfloat16, on the CPU or a CUDA device, at most
// TensorView::kMaxDims dimensions). Throws c10::TypeError / c10::ValueError naming `arg` otherwise.
TensorView to_view(const at::Tensor& t, std::string_view op, std::string_view arg);

// An absent optional tensor (or an undefined one) is the default TensorView: "no tensor".
TensorView to_view(const std::optional<at::Tensor>& t, std::string_view op, std::string_view arg);

at::ScalarType to_scalar_type(DType dtype);

// True when the core accepts `t`'s layout as it is: unit stride in the last dimension, leading
// dimensions that collapse to one row stride, rows that do not overlap. Mirrors
// tigon::detail::row_layout (src/core/check.cpp); it decides whether the binding copies.
bool has_row_layout(const at::Tensor& t);

// `t` itself when has_row_layout(t), else a contiguous copy.
at::Tensor with_row_layout(const at::Tensor& t);

// "llama" | "gemma" | "none", else c10::ValueError naming casting_mode.
CastingMode parse_casting_mode(std::string_view mode, std::string_view op);

// "mean" | "sum" | "none" (and "batchmean" when `batchmean`), else c10::ValueError naming
// reduction.
Reduction parse_reduction(std::string_view reduction, std::string_view op, bool batchmean);

// The options of the cross-entropy ops, in schema order; reduction "mean" | "sum" | "none", else
// c10::ValueError naming reduction.
CrossEntropyParams cross_entropy_params(int64_t ignore_index, std::string_view reduction,
                                        double label_smoothing, double lse_square_scale,
                                        double softcap, std::string_view op);

// Rethrows a tigon::Error as the c10 error Python maps to the same exception class:
// kInvalidArgument -> ValueError, kTypeError -> TypeError, anything else -> RuntimeError.
[[noreturn]] void rethrow_as_torch_error(const Error& error);

// Runs f(), translating tigon::Error (see rethrow_as_torch_error).
template <typename F>
auto translate_errors(F&& f) -> std::invoke_result_t<F> {
  try {
    return std::forward<F>(f)();
  } catch (const Error& error) {
    rethrow_as_torch_error(error);
  }
}

}  // namespace tigon::torch_binding
