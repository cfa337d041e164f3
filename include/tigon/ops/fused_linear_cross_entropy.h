// Fused linear cross-entropy: the cross-entropy (include/tigon/ops/cross_entropy.h, every option)
// of logits = hidden @ weight^T + bias, and the gradients of hidden, weight and bias, without
// ever materializing the [N, V] logits: rows are processed in chunks; per chunk
//   L      = round_T(hidden_c @ weight^T)          GEMM, T in, float32 accumulate, T out
//   L      = round_T(L + bias)                     when there is a bias
//   dL     = cross-entropy gradient (upstream 1), written over L (cross_entropy_fwd, fused)
//   dhidden_c = round_T(dL @ weight)               GEMM
//   dweight  += dL^T @ hidden_c                    GEMM, beta = 1: accumulated across chunks in
//                                                  float32 (a float32 dweight, or a 16-bit one
//                                                  with fp32_weight_grad_accumulation) or in
//                                                  dweight's 16-bit dtype
//   dbias    += column sums of dL (float32, fixed order), rounded to dbias's dtype at the end
// The reduction's denominators are global (over all N rows), so chunking never changes the
// loss. The forward's gradients are for upstream 1 (for reduction none: of sum_i loss[i]); a
// later scalar upstream gradient is a multiplication by the caller.
//
// Token scale (per row, not differentiated: a constant, as a detached tensor): t_i =
// token_scale[i] (1 without it), times p_y,i = exp(c_y - lse) of the row's own logits with
// use_token_scaling (Liger's use_token_scaling; float32 here, where Liger rounds p_y to the
// logits' dtype). It multiplies the row's terms and gradient: ce_i -> t_i ce_i, z_i -> t_i z_i in
// every reduction (none: loss[i] = t_i ce_i + t_i z_i, z_loss[i] = t_i z_i), and the row's dc_j
// is formed with a -> a * f_i, b -> b * f_i, f_i = t_i * g_i (float32; g_i the upstream gradient,
// 1 in the forward) before its one rounding to T. The denominators do not change: mean is
// sum_i t_i ce_i / W_ce + sum_i t_i z_i / n with W_ce, n as without a scale. Ignored rows
// contribute nothing whatever their scale.
//
// Backward (fused_linear_cross_entropy_bwd): the gradients for an upstream gradient of `loss`
// given only then (reduction none: a per-row [N] upstream g, as loss.backward(g); mean and sum:
// g_i = g[0]). Nothing is saved but the inputs: the chunk loop above runs again with g_i in f_i,
// so dL is rounded once and its rounding points are the forward's (with an upstream of 1 its
// gradients are the forward's bits on the CPU; on CUDA within the cross-entropy's tolerances,
// the rows taking the non-plain kernel). No [N, V] tensor, no lse kept between the passes.
//
// Shapes: hidden [N, H] (unit stride in H, any row stride), weight [V, H] contiguous in hidden's
// dtype, bias [V] contiguous (any float dtype) or absent; target, class weight, divisor as in
// cross-entropy. Gradients: hidden [N, H] contiguous in hidden's dtype; weight [V, H] contiguous,
// float32 or weight's dtype; bias [V], float32 or bias's dtype. Each may be absent.
// On CUDA the GEMMs run through cuBLAS on the given stream with the caller's workspace; on the
// CPU through the BLAS that CMake found (cblas_sgemm: 16-bit operands converted to float32, which
// is exact, so the products are float32 sums as above), else plain loops.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/ops/cross_entropy.h"
#include "tigon/tensor.h"

namespace tigon {

struct FusedLinearCrossEntropyParams {
  CrossEntropyParams ce;
  // Rows per chunk; 0: automatic (chunk logits <= 256 MiB on CUDA; on the CPU <= 256 KiB, at least
  // 256 rows).
  std::int64_t chunk_rows = 0;
  // A dweight in the weight's 16-bit dtype accumulates in float32 and is rounded once at the end
  // (bitwise the rounding of a float32 dweight) without a float32 copy: half of the rows
  // accumulate in the workspace (ceil(V/2) * H floats), the others in dweight's own storage
  // (which must then be 4-byte aligned). Without it, one rounding to dweight's dtype per chunk.
  // No effect on a float32 dweight (its own accumulator).
  bool fp32_weight_grad_accumulation = false;
  bool use_token_scaling = false;  // token scale times p_y (detached), header comment
};

struct FusedLinearCrossEntropyInputs {
  TensorView hidden;        // [N, H]
  TensorView weight;        // [V, H]
  TensorView bias;          // [V] or undefined
  TensorView target;        // [N] int64
  TensorView class_weight;  // [V] or undefined
  TensorView divisor;       // one float32 element (kSum) or undefined
  TensorView token_scale;   // [N] float32 contiguous (per-row factor, header comment) or undefined
};

struct FusedLinearCrossEntropyGrads {
  TensorView hidden;  // each may be undefined
  TensorView weight;
  TensorView bias;
};

// The rows per chunk a call will use.
std::int64_t fused_linear_cross_entropy_chunk_rows(const FusedLinearCrossEntropyParams& params,
                                                   const FusedLinearCrossEntropyInputs& inputs);

std::size_t fused_linear_cross_entropy_workspace_size(const FusedLinearCrossEntropyParams& params,
                                                      const FusedLinearCrossEntropyInputs& inputs,
                                                      const FusedLinearCrossEntropyGrads& grads);

// outputs as in cross_entropy_fwd (the predictions are the argmax of the logits above, rounded
// to hidden's dtype). cublas_handle: a cublasHandle_t to use on CUDA (its stream and workspace
// are set for the call), or null for one owned by tigon (per thread and device). Ignored on the
// CPU.
void fused_linear_cross_entropy(const FusedLinearCrossEntropyParams& params,
                                const FusedLinearCrossEntropyInputs& inputs,
                                const CrossEntropyOutputs& outputs,
                                const FusedLinearCrossEntropyGrads& grads, Workspace workspace,
                                Stream stream = {}, void* cublas_handle = nullptr);

// Scratch bytes fused_linear_cross_entropy_bwd needs (those of the forward with the same grads).
std::size_t fused_linear_cross_entropy_bwd_workspace_size(
    const FusedLinearCrossEntropyParams& params, const FusedLinearCrossEntropyInputs& inputs,
    const FusedLinearCrossEntropyGrads& grads);

// The gradients of `loss` for the upstream gradient grad_loss (float32 contiguous, [N] for
// reduction none, one element otherwise), recomputing the logits chunk by chunk (header comment):
// the inputs and params must be the forward's. Every reduction; grads as in the forward (each may
// be undefined; none defined: nothing is done).
void fused_linear_cross_entropy_bwd(const FusedLinearCrossEntropyParams& params,
                                    const FusedLinearCrossEntropyInputs& inputs,
                                    const TensorView& grad_loss,
                                    const FusedLinearCrossEntropyGrads& grads, Workspace workspace,
                                    Stream stream = {}, void* cublas_handle = nullptr);

}  // namespace tigon
