// kl_div / jsd / tvd arguments after validation: the contract between src/ops/divergence.cpp and
// the backends, which may assume all of it holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "math/divergence.h"
#include "tigon/ops/divergence.h"

namespace tigon::detail {

struct DivergenceArgs {
  math::DivergenceKind kind = math::DivergenceKind::kKlDiv;
  math::DivergenceOptions options;
  Reduction reduction = Reduction::kMean;
  std::int64_t ignore_index = -100;
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  std::int64_t first_dim = 0;     // input.size(0): kl_div's batchmean denominator
  DType dtype = DType::kFloat32;  // input's, target's and the gradient's
  const void* input = nullptr;
  std::int64_t input_row_stride = 0;
  const void* target = nullptr;
  std::int64_t target_row_stride = 0;
  const std::int64_t* labels = nullptr;  // [rows]; null: no row ignored
  // Forward: the loss; one float32 element, or for kNone [rows, vocab] of loss_dtype.
  void* loss = nullptr;
  DType loss_dtype = DType::kFloat32;  // float32 or dtype
  std::int64_t loss_row_stride = 0;
  // Forward: optional (upstream 1); backward: required.
  void* grad = nullptr;
  std::int64_t grad_row_stride = 0;
  // Backward: one float32 element, or for kNone [rows, vocab] of grad_loss_dtype.
  const void* grad_loss = nullptr;
  DType grad_loss_dtype = DType::kFloat32;  // float32 or dtype
  std::int64_t grad_loss_row_stride = 0;
  float* workspace = nullptr;  // forward: [rows] row sums (not for kNone)
  std::size_t workspace_bytes = 0;

  bool ignored(std::int64_t row) const { return labels != nullptr && labels[row] == ignore_index; }
};

// The reduction's denominator for `count` rows not ignored (header: n * V, B, or 1).
inline double divergence_denominator(const DivergenceArgs& a, std::int64_t count) {
  switch (a.reduction) {
    case Reduction::kMean: return static_cast<double>(count) * static_cast<double>(a.vocab);
    case Reduction::kBatchMean:
      return static_cast<double>(a.kind == math::DivergenceKind::kKlDiv ? a.first_dim : count);
    case Reduction::kNone:
    case Reduction::kSum: break;
  }
  return 1.0;
}

}  // namespace tigon::detail

namespace tigon::cpu {
std::size_t divergence_workspace_size(const detail::DivergenceArgs& args);
void divergence_fwd(const detail::DivergenceArgs& args);
void divergence_bwd(const detail::DivergenceArgs& args);
}  // namespace tigon::cpu

// The CUDA backend (src/cuda/divergence/).
namespace tigon::cuda {
std::size_t divergence_workspace_size(const detail::DivergenceArgs& args, int device);
void divergence_fwd(const detail::DivergenceArgs& args, int device, void* stream);
void divergence_bwd(const detail::DivergenceArgs& args, int device, void* stream);
}  // namespace tigon::cuda
