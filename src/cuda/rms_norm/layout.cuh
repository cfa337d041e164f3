// How rows are spread over threads, CTAs and clusters, and how backward groups rows into dW
// partials. The launcher decides (host functions below); kernels read the structs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "math/rms_norm.h"

namespace tigon::cuda::rms_norm {

// Packs (vectors of P elements; P = 16 bytes of x, or 1 on the scalar path) each thread keeps in
// registers, so a row is read from memory exactly once. The forward holds x; the backward holds
// x, dy and float32 dW accumulators, hence fewer per thread.
inline constexpr int kFwdPacksPerThread = 8;
inline constexpr int kBwdPacksPerThread = 4;
inline constexpr int kMaxRowThreads = 512;         // launch bound of the register kernels
inline constexpr int kSmallRowBlockThreads = 128;  // block size when a row needs <= 64 threads
inline constexpr int kClusterSliceThreads = 256;   // past this many threads a row, split it (sm_90)
inline constexpr int kMaxClusterSize = 8;          // the portable cluster size limit
inline constexpr int kTwoPassThreads = 512;        // block size of the two-pass (huge row) kernels

// One row's share of threads. Threads [k * threads_per_row, (k + 1) * threads_per_row) of a block
// work on row slot k; with slices > 1, a cluster of `slices` CTAs splits each row into column
// slices of slice_packs packs (rank c: packs [c * slice_packs, (c + 1) * slice_packs)).
struct RowSplit {
  std::int64_t packs = 0;   // packs per row
  int threads_per_row = 1;  // a power of two up to 64, else a multiple of 32 (then one row a block)
  int slices = 1;           // CTAs per row; 1 without a cluster
  int slice_packs = 0;
  int block_threads = 0;
  bool two_pass = false;  // too long for registers: the two-pass kernels stream it instead
};

// Backward dW: rows are cut into `groups` runs of rows_per_group consecutive rows (the last may be
// shorter); one CTA (or cluster) reduces a run in a fixed order into one float32 row of partials,
// and a second kernel adds the partial rows in order. Both numbers depend on the shape alone, so
// dW has the same bits whatever the GPU, grid or timing.
struct DwGroups {
  std::int64_t rows_per_group = 0;
  std::int64_t groups = 0;
};

// At most kMaxDwGroups partial rows (bounded workspace and finishing cost), at least
// kMinRowsPerDwGroup rows and kMinElementsPerDwGroup elements each (partials stay a few percent of
// the traffic, and a CTA gets enough work to hide memory latency).
inline constexpr std::int64_t kMaxDwGroups = 512;
inline constexpr std::int64_t kMinRowsPerDwGroup = 16;
inline constexpr std::int64_t kMinElementsPerDwGroup = 8192;

inline constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline DwGroups dw_groups(std::int64_t rows, std::int64_t hidden) {
  if (rows <= 0 || hidden <= 0) return {};
  const std::int64_t per_group = std::max(
      {ceil_div(rows, kMaxDwGroups), kMinRowsPerDwGroup, ceil_div(kMinElementsPerDwGroup, hidden)});
  return {per_group, ceil_div(rows, per_group)};
}

// Threads per row for a given thread demand: exact powers of two while several rows share a warp
// or a block, multiples of 32 (less padding) once a row fills whole blocks.
inline int row_threads_for(std::int64_t threads) {
  if (threads <= 64) {
    int g = 1;
    while (g < threads) g *= 2;
    return g;
  }
  return static_cast<int>(ceil_div(threads, 32) * 32);
}

// Spreads `packs` packs per row over threads holding packs_per_thread packs each; rows longer than
// kClusterSliceThreads threads are split over a cluster where clusters are available.
inline RowSplit split_row(std::int64_t packs, int packs_per_thread, bool clusters) {
  RowSplit split;
  split.packs = packs;
  const std::int64_t threads = ceil_div(packs, packs_per_thread);
  int slices = 1;
  if (clusters) {
    while (slices < kMaxClusterSize && ceil_div(threads, slices) > kClusterSliceThreads)
      slices *= 2;
  }
  const std::int64_t slice_packs = ceil_div(packs, slices);
  const std::int64_t slice_threads = ceil_div(slice_packs, packs_per_thread);
  if (slice_threads > kMaxRowThreads) {
    split.two_pass = true;
    split.threads_per_row = kTwoPassThreads;
    split.block_threads = kTwoPassThreads;
    return split;
  }
  split.slices = slices;
  split.slice_packs = static_cast<int>(slice_packs);
  split.threads_per_row = row_threads_for(slice_threads);
  split.block_threads = split.threads_per_row <= 64 ? kSmallRowBlockThreads : split.threads_per_row;
  return split;
}

inline int rows_per_block(const RowSplit& split) {
  return split.block_threads / split.threads_per_row;
}

struct FwdParams {
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  const void* weight = nullptr;
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  float* rstd = nullptr;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  float eps = 0.0f;
  float offset = 0.0f;
  RowSplit split;
};

struct BwdParams {
  const void* dy = nullptr;  // may be dx (in place): never read through the read-only path
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  const void* weight = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;
  std::int64_t dx_row_stride = 0;
  float* partials = nullptr;  // [groups, hidden] float32; null without a weight
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  float offset = 0.0f;
  DwGroups groups;
  RowSplit split;
};

// The storage types and options a math::RmsNorm instantiation was built for.
template <typename Math>
struct MathTraits;

template <CastingMode kMode, typename XT, typename WT, bool kAffineT>
struct MathTraits<math::RmsNorm<kMode, XT, WT, kAffineT>> {
  using X = XT;
  using W = WT;
  using Y = typename math::RmsNorm<kMode, XT, WT, kAffineT>::Y;
  static constexpr bool kAffine = kAffineT;
};

}  // namespace tigon::cuda::rms_norm
