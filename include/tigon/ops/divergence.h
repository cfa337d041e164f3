// Distillation losses between two distributions over the last dimension of [..., V] tensors:
// KL divergence (torch.nn.functional.kl_div), the generalized Jensen-Shannon divergence and the
// total variation distance (the peer's LigerJSD and LigerTVDLoss). The loss is float32 whatever
// the inputs' dtype; the gradient (of `input` only) can be written in the forward, for upstream 1.
//
// Shapes: input and target have the same shape [..., V] and the same dtype (float32, float16 or
// bfloat16), unit stride in V and leading dimensions that collapse to one row stride each (R rows,
// any row stride). labels (jsd, tvd only; optional): [R] int64, contiguous; a row whose label is
// ignore_index contributes nothing (loss 0, gradient 0) and is not counted.
//
// Per element, with x = input, t = target read once as float32 (everything below float32):
//   kl_div  (input = log q; target = p, or log p with log_target):
//     loss = t * (log t - x)    (0 * (0 - x) where t == 0: torch's xlogy(t, t) - t * x)
//            exp(t) * (t - x)   with log_target
//     dx   = -t                 -exp(t) with log_target
//   jsd     (input = log Q, the student; target = log P, the teacher; P = exp(t), Q = exp(x)):
//     beta == 0 (forward KL(P || Q)):  loss = P * (t - x),            dx = -P
//     beta == 1 (reverse KL(Q || P)):  loss = Q * (x - t),            dx = loss + Q
//     else, M = beta * P + (1 - beta) * Q:
//            loss = beta * P * t + (1 - beta) * Q * x - M * log M,    dx = (1 - beta) * Q * (x -
//            log M)
//            (= beta KL(P || M) + (1 - beta) KL(Q || M); the peer's and TRL's GKD definition,
//            beta = 0 and 1 special-cased as they do, not the limits of the middle formula)
//   tvd     (input = p, target = q, probabilities):
//     loss = 0.5 * |x - t|,  dx = x > t ? 0.5 : -0.5    (x == t gives -0.5, as the peer)
//
// Reductions (n = rows not ignored, R without labels; B = input's first dimension for kl_div, as
// torch's batchmean divides by input.size(0), and n for jsd and tvd, as the peer's):
//   kNone:      loss[r, j] = round_L(loss_rj)  ([..., V] like input, L = float32 or input's dtype)
//   kSum:       loss = S                       S = sum over rows of (float32 row sums, fixed order)
//   kMean:      loss = S / (n * V)                 the row sums added in float64, divided in
//   kBatchMean: loss = S / B                       float64, rounded once to float32
// A zero denominator (every row ignored) gives loss 0 and gradient 0, not NaN. jsd always
// reduces as kBatchMean (the peer's: the sum over non-ignored rows / n).
// Gradient, with s = float32(1 / denominator) (1 for kNone and kSum) times the upstream
// gradient u (one float32 element, or for kNone one per element, of the loss's dtype):
//   grad_input[r, j] = round_T(dx_rj * (s * u))     (kNone: round_T(dx_rj * u_rj)), T = input's
// So the fused forward (grad_input given to *_fwd) writes round_T(dx * s) for u = 1; *_bwd
// recomputes from input and target for any u, reading each once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tigon/ops/cross_entropy.h"  // Reduction
#include "tigon/tensor.h"

namespace tigon {

struct KlDivParams {
  Reduction reduction = Reduction::kMean;  // torch's default; kBatchMean is the mathematical KL
  bool log_target = false;
};

struct JsdParams {
  float beta = 0.5f;  // in [0, 1]
  std::int64_t ignore_index = -100;
};

struct TvdParams {
  Reduction reduction = Reduction::kBatchMean;
  std::int64_t ignore_index = -100;
};

struct DivergenceInputs {
  TensorView input;   // [..., V]
  TensorView target;  // input's shape and dtype
  TensorView labels;  // [R] int64 (jsd, tvd), or undefined: no row ignored
};

// Scratch bytes the forward and the backward need (per-row partial sums); always ask.
std::size_t kl_div_workspace_size(const KlDivParams& params, const DivergenceInputs& inputs);
std::size_t jsd_workspace_size(const JsdParams& params, const DivergenceInputs& inputs);
std::size_t tvd_workspace_size(const TvdParams& params, const DivergenceInputs& inputs);

// loss: float32, one element, or for kNone input's shape in float32 or input's dtype (any row
// stride). grad_input: input's shape and dtype (any row stride), or undefined for no gradient.
void kl_div_fwd(const KlDivParams& params, const DivergenceInputs& inputs, const TensorView& loss,
                const TensorView& grad_input, Workspace workspace, Stream stream = {});
void jsd_fwd(const JsdParams& params, const DivergenceInputs& inputs, const TensorView& loss,
             const TensorView& grad_input, Workspace workspace, Stream stream = {});
void tvd_fwd(const TvdParams& params, const DivergenceInputs& inputs, const TensorView& loss,
             const TensorView& grad_input, Workspace workspace, Stream stream = {});

// grad_loss: the upstream gradient of the loss, float32 one element, or for kNone input's shape
// in float32 or input's dtype. grad_input as in the forward (required).
void kl_div_bwd(const KlDivParams& params, const DivergenceInputs& inputs,
                const TensorView& grad_loss, const TensorView& grad_input, Workspace workspace,
                Stream stream = {});
void jsd_bwd(const JsdParams& params, const DivergenceInputs& inputs, const TensorView& grad_loss,
             const TensorView& grad_input, Workspace workspace, Stream stream = {});
void tvd_bwd(const TvdParams& params, const DivergenceInputs& inputs, const TensorView& grad_loss,
             const TensorView& grad_input, Workspace workspace, Stream stream = {});

}  // namespace tigon
