// RMSNorm's validation as argument builders, shared by rms_norm and fused_add_rms_norm (whose
// norm is RMSNorm's on h): every check of the normalized tensor, the weight, y / dy, rstd, dx and
// dw, returning the flat arguments with the workspace left to the caller (the queries differ).
#pragma once

#include "core/check.h"
#include "ops/rms_norm_args.h"

namespace tigon::detail {

// x is floating, [..., H] with H >= 1, row-addressable, on a device this build can run. Every
// function here names the normalized tensor `x_name` in its messages ("h" for fused_add_rms_norm's
// backward).
RowLayout checked_rms_norm_input(const char* op, const TensorView& x, const char* x_name = "x");

RmsNormFwdArgs checked_rms_norm_fwd_args(const char* op, const RmsNormParams& params,
                                         const TensorView& x, const TensorView& weight,
                                         const TensorView& y, const TensorView& rstd);

// `x` is the tensor the forward normalized. dx may alias dy (same dtype and row stride).
RmsNormBwdArgs checked_rms_norm_bwd_args(const char* op, const RmsNormParams& params,
                                         const TensorView& dy, const TensorView& x,
                                         const TensorView& weight, const TensorView& rstd,
                                         const TensorView& dx, const TensorView& dw,
                                         const char* x_name = "x");

// When `a` and `b` share their data, they must also share dtype and row stride (an in-place
// write reads each element before it overwrites it). `a_layout` / `b_layout` are their rows.
void check_alias(const char* op, const char* a_name, const TensorView& a, const RowLayout& a_layout,
                 const char* b_name, const TensorView& b, const RowLayout& b_layout);

}  // namespace tigon::detail
