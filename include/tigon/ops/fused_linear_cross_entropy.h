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
// loss. Gradients are for upstream 1 (reduction mean or sum; a later scalar upstream gradient is
// a multiplication by the caller). reduction none is supported without gradients only.
//
// Shapes: hidden [N, H] (unit stride in H, any row stride), weight [V, H] contiguous in hidden's
// dtype, bias [V] contiguous (any float dtype) or absent; target, class weight, divisor as in
// cross-entropy. Gradients: hidden [N, H] contiguous in hidden's dtype; weight [V, H] contiguous,
// float32 or weight's dtype; bias [V], float32 or bias's dtype. Each may be absent.
// On CUDA the GEMMs run through cuBLAS on the given stream with the caller's workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/ops/cross_entropy.h"
#include "tigon/tensor.h"

namespace tigon {

struct FusedLinearCrossEntropyParams {
  CrossEntropyParams ce;
  std::int64_t chunk_rows = 0;  // rows per chunk; 0: automatic (chunk logits <= 256 MiB)
  // A dweight in the weight's 16-bit dtype accumulates in float32 and is rounded once at the end
  // (bitwise the rounding of a float32 dweight) without a float32 copy: half of the rows
  // accumulate in the workspace (ceil(V/2) * H floats), the others in dweight's own storage
  // (which must then be 4-byte aligned). Without it, one rounding to dweight's dtype per chunk.
  // No effect on a float32 dweight (its own accumulator).
  bool fp32_weight_grad_accumulation = false;
};

struct FusedLinearCrossEntropyInputs {
  TensorView hidden;        // [N, H]
  TensorView weight;        // [V, H]
  TensorView bias;          // [V] or undefined
  TensorView target;        // [N] int64
  TensorView class_weight;  // [V] or undefined
  TensorView divisor;       // one float32 element (kSum) or undefined
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

}  // namespace tigon
