// Gated RMSNorm's launch config: a pure function of the shape and the pack width (16 bytes of x,
// or 1 element where pointers or strides are not 16-byte aligned). It reuses RMSNorm's row split
// (cuda/rms_norm/layout.cuh) without clusters, and RMSNorm's dW groups, so dW's bits are a
// function of the shape alone, as RMSNorm's are.
#pragma once

#include <cstdint>

#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::gated_rms_norm {

using rms_norm::DwGroups;
using rms_norm::RowSplit;

// Packs of x, gate (and dy) a thread keeps in registers, forward and backward: RMSNorm's backward
// count, whose row kernel and dW slot sharing (store_dw_partial) the backward reuses.
inline constexpr int kPacksPerThread = rms_norm::kBwdPacksPerThread;
// Rows up to kMaxRowThreads * kPacksPerThread packs (16384 16-bit elements on the 16-byte path)
// are held in one CTA's registers; longer ones stream through the two-pass kernels. No clusters:
// Qwen3-Next gates rows of head_dim (128) elements, where a cluster buys nothing.
enum class Kernel { kRows, kTwoPass };

struct Config {
  Kernel kernel = Kernel::kRows;
  RowSplit split;
  DwGroups groups;  // backward only
};

// The config for rows of `hidden` elements of `x_size` bytes, read in packs of `pack` elements.
inline Config config(std::int64_t rows, std::int64_t hidden, int pack, int x_size) {
  Config c;
  c.split = rms_norm::split_row(hidden / pack, {kPacksPerThread, rms_norm::kBlockThreads,
                                                /*cluster_slice_threads=*/0, false, 0, 1});
  c.kernel = c.split.two_pass ? Kernel::kTwoPass : Kernel::kRows;
  c.groups = rms_norm::dw_groups(rows, hidden, x_size);
  return c;
}

// Floats of dW partials the backward needs: one row per dW group.
inline std::int64_t dw_partial_floats(std::int64_t rows, std::int64_t hidden, int x_size) {
  return rms_norm::dw_partial_floats(rows, hidden, x_size, /*has_weight=*/true);
}

struct FwdParams {
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  const void* gate = nullptr;
  std::int64_t gate_row_stride = 0;
  const void* weight = nullptr;
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  float* rstd = nullptr;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  float eps = 0.0f;
  RowSplit split;
};

struct BwdParams {
  const void* dy = nullptr;  // may be dx or dgate (in place): never read through the read-only path
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  const void* gate = nullptr;
  std::int64_t gate_row_stride = 0;
  const void* weight = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;
  std::int64_t dx_row_stride = 0;
  void* dgate = nullptr;
  std::int64_t dgate_row_stride = 0;
  float* partials = nullptr;  // [groups, hidden] float32
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  DwGroups groups;
  RowSplit split;
};

}  // namespace tigon::cuda::gated_rms_norm
