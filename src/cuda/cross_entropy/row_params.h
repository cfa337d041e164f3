// What the cross-entropy row kernels are given: the rows, the options, where the per-row results
// go. Plain data, built on the host (cross_entropy.cu) and passed by value.
#pragma once

#include <cstdint>

#include "cuda/common/slice_pass.h"

namespace tigon::cuda::cross_entropy {

// kLoss: loss terms only; kLossGrad: loss terms and the gradient for upstream 1 (the training
// path); kGrad: the gradient from a saved lse (recompute backward, reduction none).
enum class RowMode { kLoss, kLossGrad, kGrad };

struct RowParams {
  const void* logits;
  std::int64_t logits_row_stride;
  const std::int64_t* target;
  void* grad;
  std::int64_t grad_row_stride;
  std::int64_t rows;
  std::int64_t vocab;
  std::int64_t ignore_index;
  float label_smoothing;
  float lse_square_scale;
  float softcap;
  const float* scales;   // workspace header (written by ce_prepare_kernel)
  const float* weights;  // float32 class weights or null
  float* row_ce;         // forward: per-row terms (workspace)
  float* row_z;
  float* loss_rows;        // kNone forward: loss[i] = ce_i + z_i (null otherwise)
  float* z_rows;           // kNone forward: z_loss[i] (or null)
  float* lse;              // forward: written if non-null; backward: read
  const float* grad_loss;  // backward upstream ([rows] for kNone, else one)
  bool per_row_upstream;
  // Forward rows only, never set for kPlain rows (cross_entropy.cu, plain_rows): the upstream
  // above (when non-null) and each row's token scale (math::ce_token_scale).
  const float* token_scale;  // [rows] or null
  bool token_scale_by_target_prob;
  // Two-pass row kernel: packs of each row kept in shared memory between the passes. Its dynamic
  // shared memory: the cp.async ring (kRingBytes, 16-byte path only), then the row cache.
  std::int64_t cache_packs;
  // One-read slice kernel: CTAs per row (a thread-block cluster when > 1) and packs per CTA
  // (slice_plan.h).
  int cluster;
  std::int64_t slice_packs;
  // Forward predictions (rows with options only; last, so that the fields above keep their
  // offsets in the kernels' parameter space).
  std::int64_t* predicted;  // the rows' argmax (-1 for ignored rows), or null
  float* row_hit;           // [argmax == target] per row (kNone: the accuracy), or null
  bool argmax;              // predicted or row_hit is set
  // How the slice kernel's CTAs of a row meet (slice_pass.h): a cluster, or two launches through
  // slice_states (kSliceFloatsPerRow floats a row: each CTA's state at 4 * rank, its argmax at
  // 4 * cluster + 2 * rank) on GPUs without clusters.
  SlicePass slice_pass;
  float* slice_states;
};

}  // namespace tigon::cuda::cross_entropy
