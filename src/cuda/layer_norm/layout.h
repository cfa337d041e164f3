// LayerNorm CUDA launch configs: one pure host function of the shape and dtype each for the
// forward and the backward (no device facts, no environment), so the same shape takes the same
// kernels, with the same sums in the same order, on every GPU. The row splits are RMSNorm's
// (rms_norm/layout.cuh: split_row, without clusters); kernels read the structs.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::layer_norm {

using rms_norm::ceil_div;
using rms_norm::DwGroups;
using rms_norm::rows_per_block;
using rms_norm::RowSplit;

// Forward: rows held in registers, kFwdPacksPerThread 16-byte packs a thread (x read once), up to
// rms_norm::kMaxRowThreads threads a row (bf16 rows up to 32768 elements, float32 up to 16384);
// longer rows stream through one 512-thread CTA a row in three sweeps (sum, centered sum, y), the
// later two hitting L2.
inline constexpr int kFwdPacksPerThread = 8;
inline constexpr int kRowsBlockThreads = 128;  // short rows share a block up to this many threads
inline constexpr int kStreamThreads = 512;

enum class FwdKernel { kRows, kStreaming };

struct FwdConfig {
  FwdKernel kernel = FwdKernel::kRows;
  RowSplit split;  // kRows: the register split; kStreaming: packs only
};

// The streaming forward for rows of `packs` packs (what fwd_config returns for rows too long for
// registers; tests force it on shorter rows too).
inline FwdConfig streaming_fwd_config(std::int64_t packs) {
  FwdConfig c;
  c.kernel = FwdKernel::kStreaming;
  c.split.packs = packs;
  c.split.two_pass = true;
  c.split.threads_per_row = kStreamThreads;
  c.split.block_threads = kStreamThreads;
  return c;
}

// Rows of `hidden` elements read in packs of `pack` elements (16 bytes, or 1 on the scalar path).
inline FwdConfig fwd_config(std::int64_t hidden, int pack) {
  const std::int64_t packs = ceil_div(hidden, pack);
  FwdConfig c;
  c.split = rms_norm::split_row(packs, {kFwdPacksPerThread, kRowsBlockThreads,
                                        /*cluster_slice_threads=*/0, /*two_pass=*/false, 0, 1});
  return c.split.two_pass ? streaming_fwd_config(packs) : c;
}

// Backward: a CTA takes one dW group (a run of consecutive rows) at a time, each row held in
// registers (dy and x, kBwdPacksPerThread[] packs a thread, the fewest that fit) with the dW and dB
// accumulators of its columns; at the group's end they become the group's float32 partial rows.
// Rows of up to 128 packs (K = 1) share a block of 256 threads (more loads in flight an SM with
// the groups' count capped); their row slots' accumulators meet in shared memory in slot order.
// Rows longer than 2048 packs (bf16 past 16384 elements, float32 past 8192) stream: a chunk of
// rows' sums first, then column by column over the chunk (its second read hits L2).
inline constexpr int kBwdMaxPacksK1 = 128;    // K = 1 up to this many packs a row
inline constexpr int kBwdMaxPacksK2 = 512;    // K = 2
inline constexpr int kBwdMaxPacksK4 = 2048;   // K = 4 (512 threads a row)
inline constexpr int kBwdBlockThreads = 256;  // rows of up to 128 packs: 2 or more a block
inline constexpr int kBwdMaxPack = 8;         // the widest pack (16 bytes of 16-bit x)
// Streaming backward: rows whose sums go first; the chunk (2 rows of dy and x, 256 KB for bf16
// rows of 32768) is reread from L2 by its column sweep.
inline constexpr int kBwdChunkRows = 2;

// dW/dB partial rows: at most kMaxDwGroups groups of at least kMinRowsPerGroup rows, and no more
// than kMaxPartialBytes of partials a gradient unless that leaves fewer than kMinDwGroups. The
// partials are written once and read once: 16 / (6 * rows a group) of a bf16 backward's traffic.
// A function of the shape alone, and so are dW's and dB's bits.
inline constexpr std::int64_t kMaxDwGroups = 512;
inline constexpr std::int64_t kMinDwGroups = 64;
inline constexpr std::int64_t kMaxPartialBytes = std::int64_t{16} << 20;
inline constexpr std::int64_t kMinRowsPerGroup = 8;

enum class BwdKernel { kRows, kStreaming };

struct BwdConfig {
  BwdKernel kernel = BwdKernel::kRows;
  int packs_per_thread = 1;  // kRows: 1, 2 or 4
  RowSplit split;
  DwGroups groups;
};

inline DwGroups dw_groups(std::int64_t rows, std::int64_t hidden) {
  if (rows <= 0 || hidden <= 0) return {};
  const std::int64_t by_bytes =
      std::max(kMinDwGroups, kMaxPartialBytes / (hidden * std::int64_t{sizeof(float)}));
  const std::int64_t cap = std::min(kMaxDwGroups, by_bytes);
  const std::int64_t per_group = std::max(ceil_div(rows, cap), kMinRowsPerGroup);
  return {per_group, ceil_div(rows, per_group)};
}

// The streaming backward (what bwd_config returns for rows too long for registers; tests force it
// on shorter rows too).
inline BwdConfig streaming_bwd_config(std::int64_t rows, std::int64_t hidden, int pack) {
  BwdConfig c;
  c.kernel = BwdKernel::kStreaming;
  c.groups = dw_groups(rows, hidden);
  c.split.packs = ceil_div(hidden, pack);
  c.split.two_pass = true;
  c.split.threads_per_row = kStreamThreads;
  c.split.block_threads = kStreamThreads;
  return c;
}

inline BwdConfig bwd_config(std::int64_t rows, std::int64_t hidden, int pack) {
  const std::int64_t packs = ceil_div(hidden, pack);
  if (packs > kBwdMaxPacksK4) return streaming_bwd_config(rows, hidden, pack);
  BwdConfig c;
  c.groups = dw_groups(rows, hidden);
  c.packs_per_thread = packs <= kBwdMaxPacksK1 ? 1 : packs <= kBwdMaxPacksK2 ? 2 : 4;
  // Row slots share a block only at one pack a thread (block target 1: one row a block).
  const int block_target = c.packs_per_thread == 1 ? kBwdBlockThreads : 1;
  c.split = rms_norm::split_row(packs, {c.packs_per_thread, block_target, 0, false, 0, 1});
  return c;
}

// Floats of workspace a backward needs: a [groups, hidden] partial block per wanted gradient.
inline std::int64_t partial_floats(std::int64_t rows, std::int64_t hidden, bool wants_dw,
                                   bool wants_db) {
  const std::int64_t buffers = (wants_dw ? 1 : 0) + (wants_db ? 1 : 0);
  return buffers * dw_groups(rows, hidden).groups * hidden;
}

struct FwdParams {
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  const void* weight = nullptr;  // null: 1
  const void* bias = nullptr;    // null: 0
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
  float* mean = nullptr;
  float* rstd = nullptr;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  float eps = 0.0f;
  RowSplit split;
};

struct BwdParams {
  const void* dy = nullptr;  // may be dx (in place): never read through the read-only path
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  const void* weight = nullptr;  // null: 1
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;
  std::int64_t dx_row_stride = 0;
  float* dw_partials = nullptr;  // [groups, hidden]; null: no dW wanted
  float* db_partials = nullptr;  // [groups, hidden]; null: no dB wanted
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  DwGroups groups;
  RowSplit split;
};

}  // namespace tigon::cuda::layer_norm
