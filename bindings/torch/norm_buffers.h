// Buffers and parameters shared by the norm operators (RMSNorm, fused add + RMSNorm, LayerNorm,
// DyT, PolyNorm, gated RMSNorm): how their small parameters are taken, how their statistics,
// gradients and workspaces are allocated from torch, and the layout check of their in-place
// backwards.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "convert.h"
#include "tigon/ops/rms_norm.h"
#include "tigon/tensor.h"

namespace tigon::torch_binding {

inline RmsNormParams rms_norm_params(double eps, double offset, std::string_view casting_mode,
                                     std::string_view op) {
  RmsNormParams params;
  params.eps = static_cast<float>(eps);
  params.offset = static_cast<float>(offset);
  params.casting_mode = parse_casting_mode(casting_mode, op);
  return params;
}

// Parameters are small: a strided one is copied rather than rejected.
inline std::optional<at::Tensor> contiguous_parameter(const std::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return t->contiguous();
}

// A norm's in-place backward writes dx into `t` (arg), which must then be addressable as rows
// without a copy (its dtype, x's, is the core's check).
inline void check_in_place_rows(std::string_view op, std::string_view arg, const at::Tensor& t) {
  TORCH_CHECK_VALUE(has_row_layout(t),
                    argument_message(op, arg,
                                     "unit stride in the last dimension and leading dimensions "
                                     "that collapse to one row stride (dx is written into " +
                                         std::string(arg) + ")",
                                     "strides " + int_list(t.strides())));
}

inline at::Tensor empty_bytes(std::size_t bytes, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(bytes)}, like.options().dtype(at::kByte));
}

inline Workspace to_workspace(const at::Tensor& buffer) {
  return Workspace{buffer.numel() ? buffer.data_ptr() : nullptr,
                   static_cast<std::size_t>(buffer.numel())};
}

// One float32 statistic per row: x.shape[:-1].
inline at::Tensor empty_row_statistic(const at::Tensor& x) {
  return at::empty(x.sizes().slice(0, x.dim() > 0 ? x.dim() - 1 : 0),
                   x.options().dtype(at::kFloat));
}

// A statistic as the core takes it, [R] contiguous (this also keeps empty shapes such as [2, 0]
// away from the core's stride check).
inline at::Tensor flat(const at::Tensor& statistic) { return statistic.contiguous().view({-1}); }

// A parameter's gradient: its shape and dtype, or an empty [0] tensor without the parameter.
inline at::Tensor empty_parameter_grad(const std::optional<at::Tensor>& parameter,
                                       const at::Tensor& x) {
  return parameter ? at::empty(parameter->sizes(), parameter->options())
                   : at::empty({0}, x.options());
}

}  // namespace tigon::torch_binding
