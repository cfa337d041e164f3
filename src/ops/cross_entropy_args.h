// Cross-entropy arguments after validation: the contract between src/ops/cross_entropy.cpp and
// the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "tigon/ops/cross_entropy.h"

namespace tigon::detail {

struct CrossEntropyArgs {
  CrossEntropyParams params;
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  const void* logits = nullptr;
  std::int64_t logits_row_stride = 0;
  DType logits_dtype = DType::kFloat32;
  const std::int64_t* target = nullptr;
  const void* weight = nullptr;  // [vocab] class weights; null: none
  DType weight_dtype = DType::kFloat32;
  const float* divisor = nullptr;  // one element, kSum only; null: none
  // Forward outputs (loss is required; the others may be null).
  float* loss = nullptr;
  float* z_loss = nullptr;
  float* lse = nullptr;               // forward: written if non-null; backward: read
  std::int64_t* predicted = nullptr;  // forward: [rows] argmax (-1 ignored), if non-null
  float* accuracy = nullptr;          // forward: [rows] hits (kNone) or the token accuracy
  // The gradient (forward: optional, for upstream 1; backward: required). May equal logits.
  void* grad = nullptr;
  std::int64_t grad_row_stride = 0;
  // Backward: the upstream gradient, [rows] for kNone, one element otherwise. Forward rows with a
  // gradient (fused linear cross-entropy's backward recomputes them): the gradient is for this
  // upstream instead of 1 when non-null.
  const float* grad_loss = nullptr;
  // Forward rows only (fused linear cross-entropy; cross_entropy_fwd / _bwd never set them): each
  // non-ignored row's terms and gradient are multiplied by its token scale (math::ce_token_scale):
  // token_scale[row] (null: 1), times p_y when token_scale_by_target_prob.
  const float* token_scale = nullptr;
  bool token_scale_by_target_prob = false;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;

  bool predicts() const { return predicted != nullptr || accuracy != nullptr; }
};

// The forward's outputs (CrossEntropyOutputs) for the rows and reduction of `a`, validated on
// `device` and set in `a`; errors name `op`'s arguments.
void set_loss_outputs(const char* op, const CrossEntropyOutputs& outputs, Device device,
                      CrossEntropyArgs& a);

// grad *= scale[0] (skipped when scale[0] == 1).
struct ScaleGradArgs {
  void* grad = nullptr;
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  std::int64_t row_stride = 0;
  DType dtype = DType::kFloat32;
  const float* scale = nullptr;
};

// Workspace layout shared by both backends, in floats: [0, 4) the denominators and scales
// (CeScales), then per-row cross-entropy and z-loss terms and hits (forward only), then float32
// class weights (CUDA only).
struct CeScales {
  float weight_sum;           // W_ce: sum of w_y over non-ignored rows
  float count;                // n: non-ignored rows
  float a;                    // scale of the cross-entropy terms (1/W_ce, 1/d or 1)
  float b;                    // scale of the z-loss terms (1/n, 1/d or 1)
  float weight_total = 0.0f;  // W: sum of all class weights (vocab without weights)
};

// Floats a row of RowTerms::slices holds: the CUDA slice kernel's per-CTA results for rows split
// over up to 2 CTAs (its online state, 4 floats, and its argmax, 2), on GPUs without clusters.
inline constexpr std::int64_t kSliceFloatsPerRow = 2 * (4 + 2);

// Where the forward's per-row results go (workspace arrays of `rows` floats): cross-entropy and
// z-loss terms, the hits [pred_i == y] (written when the token accuracy is asked for), and on a
// CUDA GPU without clusters kSliceFloatsPerRow floats a row of slice results (null elsewhere).
struct RowTerms {
  float* ce = nullptr;
  float* z = nullptr;
  float* hit = nullptr;
  float* slices = nullptr;

  RowTerms offset(std::int64_t rows) const {
    return {ce + rows, z + rows, hit ? hit + rows : nullptr,
            slices ? slices + rows * kSliceFloatsPerRow : nullptr};
  }
};

// The CUDA kernels index classes within a row in 32 bits (rows: 64-bit), with headroom for the
// indices of a pack group past the row's end: CUDA logits have at most this many classes.
inline constexpr std::int64_t kMaxCudaVocab = std::int64_t{1} << 30;

// Rejects a vocabulary over kMaxCudaVocab on a CUDA device, naming `arg` of `op`.
inline void check_cuda_vocab(const char* op, const char* arg, std::int64_t vocab, Device device) {
  TIGON_CHECK_ARG(device.type != DeviceType::kCUDA || vocab <= kMaxCudaVocab, op, arg,
                  "a vocabulary of at most 2^30 classes on CUDA", std::to_string(vocab));
}

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t cross_entropy_workspace_size(const detail::CrossEntropyArgs& args, bool forward);
void cross_entropy_fwd(const detail::CrossEntropyArgs& args);
void cross_entropy_bwd(const detail::CrossEntropyArgs& args);
void cross_entropy_scale_grad(const detail::ScaleGradArgs& args);

// Building blocks of the fused linear cross-entropy: the reduction's scales over all rows; the
// rows of `args` (a chunk: its pointers and row count) with those scales, per-row terms into
// `terms`, args.predicted and the gradient (if args.grad) for upstream 1; the final reduction.
detail::CeScales cross_entropy_scales(const detail::CrossEntropyArgs& args);
void cross_entropy_rows(const detail::CrossEntropyArgs& args, const detail::CeScales& scales,
                        detail::RowTerms terms);
void cross_entropy_finish(const detail::CrossEntropyArgs& args, const detail::CeScales& scales,
                          detail::RowTerms terms);
}  // namespace tigon::cpu

namespace tigon::cuda {
std::size_t cross_entropy_workspace_size(const detail::CrossEntropyArgs& args, bool forward,
                                         int device);
void cross_entropy_fwd(const detail::CrossEntropyArgs& args, int device, void* stream);
void cross_entropy_bwd(const detail::CrossEntropyArgs& args, int device, void* stream);
void cross_entropy_scale_grad(const detail::ScaleGradArgs& args, int device, void* stream);
}  // namespace tigon::cuda
