// The RoPE torch operators, shared by the CPU and CUDA registrations: they differ only in the
// stream they pass to the tigon API (and the device guard the CUDA registration holds).
// Arguments follow HF's apply_rotary_pos_emb: q [B, Hq, S, D] and k [B, Hkv, S, D] (or
// [B, S, H, D] with unsqueeze_dim=2, or 3-D without the batch), cos / sin [B | 1, S, R] or
// [S, R] unsqueezed at unsqueeze_dim and broadcast against q and k.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "tigon/tensor.h"

namespace tigon::torch_binding {

// tigon::rope_fwd(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim=1,
//                 bool in_place=False) -> (Tensor q_embed, Tensor k_embed)
// Outputs have q's / k's layout (empty_like) and dtype promote(q, cos). in_place is only read by
// the autograd kernel (rope_autograd.cpp).
std::tuple<at::Tensor, at::Tensor> rope_fwd(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& cos, const at::Tensor& sin,
                                            int64_t unsqueeze_dim, Stream stream);

// tigon::rope_fwd_inplace(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin,
//                         int unsqueeze_dim=1) -> (); needs promote(q, cos) == q's dtype.
void rope_fwd_inplace(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                      const at::Tensor& sin, int64_t unsqueeze_dim, Stream stream);

// tigon::rope_bwd(Tensor dq_embed, Tensor dk_embed, Tensor cos, Tensor sin, int unsqueeze_dim,
//                 ScalarType dtype) -> (Tensor dq, Tensor dk); dtype: q's (and k's) dtype.
std::tuple<at::Tensor, at::Tensor> rope_bwd(const at::Tensor& dq_embed, const at::Tensor& dk_embed,
                                            const at::Tensor& cos, const at::Tensor& sin,
                                            int64_t unsqueeze_dim, at::ScalarType dtype,
                                            Stream stream);

// tigon::rope_bwd_inplace(Tensor(a!) dq_embed, Tensor(b!) dk_embed, Tensor cos, Tensor sin,
//                         int unsqueeze_dim) -> (); dq, dk are written into the gradients.
void rope_bwd_inplace(const at::Tensor& dq_embed, const at::Tensor& dk_embed, const at::Tensor& cos,
                      const at::Tensor& sin, int64_t unsqueeze_dim, Stream stream);

}  // namespace tigon::torch_binding
