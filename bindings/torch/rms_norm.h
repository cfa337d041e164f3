// The RMSNorm torch operators, shared by the CPU and CUDA registrations: they differ only in the
// stream they pass to the tigon API (and the device guard the CUDA registration holds).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

#include "tigon/tensor.h"

namespace tigon::torch_binding {

// tigon::rms_norm_fwd(Tensor x, Tensor? weight, float eps, float offset, str casting_mode,
//                     bool in_place=False) -> (Tensor y, Tensor rstd)
// in_place is only read by the autograd kernel (rms_norm_autograd.cpp).
std::tuple<at::Tensor, at::Tensor> rms_norm_fwd(const at::Tensor& x,
                                                const std::optional<at::Tensor>& weight, double eps,
                                                double offset, c10::string_view casting_mode,
                                                bool in_place, Stream stream);

// tigon::rms_norm_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor rstd, float offset,
//                     str casting_mode) -> (Tensor dx, Tensor dw)
std::tuple<at::Tensor, at::Tensor> rms_norm_bwd(const at::Tensor& dy, const at::Tensor& x,
                                                const std::optional<at::Tensor>& weight,
                                                const at::Tensor& rstd, double offset,
                                                c10::string_view casting_mode, Stream stream);

// tigon::rms_norm_bwd_inplace(Tensor(a!) dy, Tensor x, Tensor? weight, Tensor rstd, float offset,
//                             str casting_mode) -> Tensor dw; dx is written into dy.
at::Tensor rms_norm_bwd_inplace(const at::Tensor& dy, const at::Tensor& x,
                                const std::optional<at::Tensor>& weight, const at::Tensor& rstd,
                                double offset, c10::string_view casting_mode, Stream stream);

}  // namespace tigon::torch_binding
