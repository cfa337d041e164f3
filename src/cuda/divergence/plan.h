// How the kl_div / jsd / tvd CUDA kernels split their work, as one pure function of the arguments
// (host logic only, checked in every build without a GPU).
//
// A row is cut into segments of kSegment elements, a count that depends on V alone. A CTA of
// kThreads threads takes one (row, segment) tile at a time; thread l takes the groups of kGroup
// consecutive elements l, l + kThreads, ... (kGroupsPerLane of them) of its segment, adds their
// losses in element order, and the CTA adds its threads' sums in a fixed tree (reduce.cuh). The
// finish adds a row's segment sums in segment order (float32), then the rows in float64. So a
// loss's bits depend on V and the data only: never on the access path, the grid or the batch.
#pragma once

#include <cstdint>

#include "ops/divergence_args.h"

namespace tigon::cuda::divergence {

inline constexpr int kThreads = 256;
inline constexpr int kGroup = 8;  // one 16-byte pack of bf16/fp16, two of float32
inline constexpr int kGroupsPerLane = 4;
inline constexpr std::int64_t kSegment = std::int64_t{kThreads} * kGroup * kGroupsPerLane;

// Floats before the segment sums in the workspace: the denominator (a double) and the scale.
inline constexpr std::int64_t kHeaderFloats = 4;

// kVector: each full group as 16-byte loads and stores (a partial last group element by element);
// kScalar: every element on its own. Both give the same bits.
enum class Access : std::uint8_t { kScalar, kVector };

struct Plan {
  Access access = Access::kScalar;
  // CTAs at most (0: as many as fit on the device at once); the grid never changes the bits.
  std::int64_t max_ctas = 0;
};

inline std::int64_t segments_per_row(std::int64_t vocab) {
  return (vocab + kSegment - 1) / kSegment;
}

// Floats of workspace: the header, and a sum per (row, segment) unless the reduction is kNone.
inline std::int64_t workspace_floats(const detail::DivergenceArgs& a) {
  const bool sums = a.reduction != Reduction::kNone;
  return kHeaderFloats + (sums ? a.rows * segments_per_row(a.vocab) : 0);
}

// Every row of a tensor starts on a 16-byte boundary (element size `bytes`).
inline bool rows_aligned(const void* base, std::int64_t row_stride, std::int64_t rows,
                         std::int64_t bytes) {
  return reinterpret_cast<std::uintptr_t>(base) % 16 == 0 &&
         (rows <= 1 || (row_stride * bytes) % 16 == 0);
}

// The plan for `a`: 16-byte access when every tensor the kernels touch per element (input,
// target, the gradient, a kNone loss or upstream gradient) has 16-byte aligned rows.
inline Plan divergence_plan(const detail::DivergenceArgs& a) {
  const std::int64_t t = static_cast<std::int64_t>(element_size(a.dtype));
  bool vector = rows_aligned(a.input, a.input_row_stride, a.rows, t) &&
                rows_aligned(a.target, a.target_row_stride, a.rows, t);
  if (a.grad != nullptr) vector = vector && rows_aligned(a.grad, a.grad_row_stride, a.rows, t);
  if (a.reduction == Reduction::kNone) {
    if (a.loss != nullptr) {
      const auto e = static_cast<std::int64_t>(element_size(a.loss_dtype));
      vector = vector && rows_aligned(a.loss, a.loss_row_stride, a.rows, e);
    }
    if (a.grad_loss != nullptr) {
      const auto e = static_cast<std::int64_t>(element_size(a.grad_loss_dtype));
      vector = vector && rows_aligned(a.grad_loss, a.grad_loss_row_stride, a.rows, e);
    }
  }
  return {vector ? Access::kVector : Access::kScalar, 0};
}

}  // namespace tigon::cuda::divergence
