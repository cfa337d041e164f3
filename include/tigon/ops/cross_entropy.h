// Cross-entropy over the last dimension of [N, V] logits, with class weights, ignore_index, label
// smoothing, z-loss and logit soft-capping; the loss is float32 whatever the logits' dtype, and
// the gradient can be written into the logits buffer (no memory beyond the logits).
//
// Shapes: logits [N, V] float32/float16/bfloat16 with unit stride in V and any row stride;
// target [N] int64 (contiguous); weight [V] (class weights, any float dtype, contiguous) or
// absent; divisor: a float32 tensor of one element on the logits' device, or absent.
//
// Per row i with y = target[i] (rows with y == ignore_index contribute nothing: loss 0, grad 0),
// everything float32, x = logits[i, :] read once as float32:
//   c_j   = softcap > 0 ? softcap * tanh(x_j / softcap) : x_j          (Gemma2 final softcapping)
//   lse   = log(sum_j exp(c_j))                 max and sum of exp2 (CUDA: online, one pass)
//   p_j   = exp(c_j - lse)
//   ce_i  = (1 - ls) * w_y * (lse - c_y) + (ls / V) * sum_j w_j * (lse - c_j)      (w = 1 without
//           class weights; ls = label_smoothing; this is torch.nn.functional.cross_entropy)
//   z_i   = lse_square_scale * lse^2                                      (z-loss, never weighted)
//   pred_i = argmax_j c_j as torch.argmax (the first index among equal maxima; a NaN counts as the
//           maximum, the first NaN wins), -1 for an ignored row; hit_i = [pred_i == y]
//           (optional outputs, no gradient; computed in the pass that computes lse)
// Reductions (no host synchronization; denominators are summed on the device in a fixed order):
//   kNone: loss[i] = ce_i + z_i, z_loss[i] = z_i                              (shape [N])
//   kSum:  loss = (sum ce_i + sum z_i) / d, z_loss = sum z_i / d, d = divisor or 1   (shape [])
//   kMean: loss = sum ce_i / W_ce + sum z_i / n, z_loss = sum z_i / n, with n = number of
//          non-ignored rows and W_ce = sum of w_y over them (= n without class weights), as torch.
//          A zero denominator gives 0, not NaN (all-ignored batch: loss 0, gradient 0).
//   accuracy (token accuracy): kNone: accuracy[i] = hit_i (1 or 0; 0 for an ignored row);
//          kSum, kMean: accuracy = sum hit_i / n over the non-ignored rows (never weighted, never
//          divided by the divisor; 0 when n = 0). A target outside [0, V) is a miss.
// Gradient of `loss` (upstream 1; for kNone, of sum_i loss[i]), with a = 1/W_ce (mean), 1/d (sum),
// 1 (none) and b = 1/n (mean), 1/d (sum), 1 (none):
//   dc_j = a * ((1 - ls) * w_y * (p_j - [j == y]) + (ls / V) * (W * p_j - w_j))
//          + b * 2 * lse_square_scale * lse * p_j                        (W = sum_j w_j, or V)
//   dx_j = round_T(dc_j * (softcap > 0 ? 1 - tanh(x_j / softcap)^2 : 1))
// The true-class term p_y - 1 is formed in float32 as expm1(c_y - lse) before any rounding, so a
// confident prediction (p_y -> 1) keeps its relative precision in a bfloat16 gradient.
//
// Two ways to get the gradient (see docs/ops/cross_entropy.md):
// * fused: cross_entropy_fwd with grad_logits defined writes the gradient for upstream 1 in the
//   same launch (second sweep over the row while it is cache resident); grad_logits may be the
//   logits themselves. A later upstream gradient g (scalar, on the device) is applied by
//   cross_entropy_scale_grad, which leaves the buffer untouched when g == 1.
// * recompute: cross_entropy_fwd without grad_logits saves lse; cross_entropy_bwd re-reads the
//   logits and writes grad * upstream in one pass (a per-row upstream for kNone).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/tensor.h"

namespace tigon {

// kBatchMean: the distillation losses only (divergence.h); cross-entropy rejects it.
enum class Reduction : std::uint8_t { kNone, kSum, kMean, kBatchMean };

const char* reduction_name(Reduction reduction) noexcept;

struct CrossEntropyParams {
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::kMean;
  float label_smoothing = 0.0f;   // in [0, 1]
  float lse_square_scale = 0.0f;  // z-loss coefficient, finite and >= 0
  float softcap = 0.0f;           // 0: off; > 0: logits -> softcap * tanh(logits / softcap)
};

// The tensors every cross-entropy call reads.
struct CrossEntropyInputs {
  TensorView logits;   // [N, V]
  TensorView target;   // [N] int64
  TensorView weight;   // [V] class weights, or undefined
  TensorView divisor;  // one float32 element (kSum only: loss / divisor), or undefined
};

// What the forward computes of the loss (cross_entropy_fwd, fused_linear_cross_entropy). Only
// loss is required; each other output is written when defined. All contiguous, on the device of
// the inputs.
struct CrossEntropyOutputs {
  TensorView loss;       // float32: [N] for kNone, one element otherwise
  TensorView z_loss;     // float32, as loss
  TensorView predicted;  // [N] int64: pred_i
  TensorView accuracy;   // float32, as loss: hit_i (kNone) or the token accuracy
};

// Scratch bytes cross_entropy_fwd needs (per-row partial losses and hits, the denominators; on a
// GPU without thread-block clusters also the slice results of rows split across blocks): a
// function of the shapes, options and device only. Always ask.
std::size_t cross_entropy_fwd_workspace_size(const CrossEntropyParams& params,
                                             const CrossEntropyInputs& inputs);

// lse: [N] float32 contiguous, or undefined. grad_logits: [N, V] in the logits' dtype (it may be
// the logits view itself, same layout), or undefined for no gradient.
void cross_entropy_fwd(const CrossEntropyParams& params, const CrossEntropyInputs& inputs,
                       const CrossEntropyOutputs& outputs, const TensorView& lse,
                       const TensorView& grad_logits, Workspace workspace, Stream stream = {});

// Scratch bytes cross_entropy_bwd needs.
std::size_t cross_entropy_bwd_workspace_size(const CrossEntropyParams& params,
                                             const CrossEntropyInputs& inputs);

// grad_loss: float32, [N] for kNone, one element otherwise (the upstream gradient of `loss`).
// lse from cross_entropy_fwd. grad_logits as in the forward (may alias the logits).
void cross_entropy_bwd(const CrossEntropyParams& params, const CrossEntropyInputs& inputs,
                       const TensorView& lse, const TensorView& grad_loss,
                       const TensorView& grad_logits, Workspace workspace, Stream stream = {});

// grad_logits *= grad_loss[0] in place (one float32 element on grad_logits' device); nothing is
// written when it equals 1. Rounds once more, to the gradient's dtype.
void cross_entropy_scale_grad(const TensorView& grad_logits, const TensorView& grad_loss,
                              Stream stream = {});

}  // namespace tigon
