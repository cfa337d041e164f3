// The forward arguments of an elementwise norm (DyT, PolyNorm: y = f(x) row by row with a few
// learnable parameters, no saved statistics): flat rows and strides after validation, with the
// op's own parameters. y has x's dtype.
#pragma once

#include <cstdint>

#include "core/check.h"
#include "tigon/tensor.h"

namespace tigon::detail {

template <typename Params>
struct ElementwiseNormFwdArgs {
  Params params;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  DType x_dtype = DType::kFloat32;
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
};

// The rows of validated x and y (their layouts as checked_norm_input / checked_like returned).
template <typename Params>
ElementwiseNormFwdArgs<Params> elementwise_norm_fwd_args(const Params& params, const TensorView& x,
                                                         const RowLayout& xl, const TensorView& y,
                                                         const RowLayout& yl) {
  ElementwiseNormFwdArgs<Params> a;
  a.params = params;
  a.rows = xl.rows;
  a.hidden = xl.hidden;
  a.x = x.data;
  a.x_row_stride = xl.row_stride;
  a.x_dtype = x.dtype;
  a.y = y.data;
  a.y_row_stride = yl.row_stride;
  return a;
}

}  // namespace tigon::detail
