// Checks shared by the norms (RMSNorm, LayerNorm, DyT, PolyNorm): the [H] parameter vectors, the
// per-row float32 statistics they save, and tensors that must have x's shape.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "tigon/tensor.h"

namespace tigon::detail {

// x, the tensor a norm normalizes: floating, [..., H] with H >= 1, row-addressable, on a device
// this build can run. `x_name` names it in the messages.
RowLayout checked_norm_input(std::string_view op, const TensorView& x,
                             std::string_view x_name = "x");

// t is on ref's device, of `dtype`, of ref's shape and row-addressable (y, dy, dx, residual...);
// `ref_name` names ref in the messages.
RowLayout checked_like(std::string_view op, std::string_view arg, const TensorView& t,
                       const TensorView& ref, DType dtype, std::string_view ref_name = "x");

// t has ref's shape; `ref_name` names ref in the message.
void check_same_shape(std::string_view op, std::string_view arg, const TensorView& t,
                      const TensorView& ref, std::string_view ref_name = "x");

// t is [hidden], contiguous, on `device` (x's), non-null when hidden > 0. The dtype is the
// caller's check.
void check_hidden_vector(std::string_view op, std::string_view arg, const TensorView& t,
                         Device device, std::int64_t hidden);

// t is [n], contiguous, on `device` (x's), non-null when n > 0: a parameter vector whose length is
// fixed by the op (PolyNorm's 3 weights); `what` says why, in the message. The dtype is the
// caller's check.
void check_parameter_vector(std::string_view op, std::string_view arg, const TensorView& t,
                            Device device, std::int64_t n, std::string_view what);

// A parameter's dtype (arg): x's or float32 (16-bit activations with float32 master weights).
void check_parameter_dtype(std::string_view op, std::string_view arg, DType got, DType x_dtype);

// t is a learnable scalar (or its gradient): one element (any shape) of `dtype`, non-null, on
// `device` (x's).
void check_scalar_parameter(std::string_view op, std::string_view arg, const TensorView& t,
                            Device device, DType dtype);

// t is a contiguous float32 tensor of `rows` elements (any shape) on `device` (x's): one
// statistic per row, such as rstd.
void check_row_statistic(std::string_view op, std::string_view arg, const TensorView& t,
                         Device device, std::int64_t rows);

}  // namespace tigon::detail
