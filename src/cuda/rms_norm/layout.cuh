// How rows are spread over threads, CTAs and clusters, and how backward groups rows into dW
// partials. The launcher decides (host functions below); kernels read the structs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/slice_pass.h"
#include "math/rms_norm.h"

namespace tigon::cuda::rms_norm {

// Packs (vectors of P elements; P = 16 bytes of x, or 1 on the scalar path) each thread keeps in
// registers, so a row is read from memory exactly once. The forward holds x; the backward holds
// x, dy and float32 dW accumulators, hence fewer per thread.
inline constexpr int kFwdPacksPerThread = 8;
// The light forward kernel with this many packs a thread loads a 16-bit weight before the row's
// reduction (K more packs of registers: within its 64 without spilling, where a float32 weight
// would spill).
inline constexpr int kFwdWeightEarlyPacks = 4;
inline constexpr int kBwdPacksPerThread = 4;
inline constexpr int kMaxRowThreads = 512;   // launch bound of the register kernels
inline constexpr int kMaxClusterSize = 8;    // the portable cluster size limit
inline constexpr int kTwoPassThreads = 512;  // block size of the two-pass (streaming) kernels

// The launch choices, fixed here (each one's measurements: docs/ops/rms_norm.md, "Launch
// choices"). fwd_config / bwd_config / dw_groups / finish_config below turn them into a launch
// config for one shape; nothing else (no environment, no process state) changes them.
inline constexpr int kBlockThreads = 128;         // rows share a block up to this many threads
inline constexpr int kClusterSliceThreads = 512;  // past this many threads a row, use a cluster
// Rows over a cluster take slices of at most 256 threads: two CTAs an SM, so one CTA's loads are
// in flight while the other reduces. The backward's only for rows that 512-thread slices would
// spread over more than 2 CTAs (moving 2-CTA rows to 4 cost it 15-24 points on an H100).
inline constexpr int kClusteredSliceThreads = 256;
inline constexpr int kBwdClusteredAbove = 2;
// The light forward kernel (kLightPacksPerThread packs a thread, weight loaded before the
// reduction) for 16-bit rows one CTA holds in at most kLightMaxRowThreads threads. On GPUs whose
// peak DRAM bandwidth is at least kFastMemoryGbps (an H200), rows needing more than
// kLightMaxRowThreadsFast light threads take the 8-pack kernel instead where the two pair
// (light_pairs_with_rows: the same sums in the same order, so the same bits); rows that do not
// pair stay on the light kernel on every GPU.
inline constexpr int kLightPacksPerThread = 4;
inline constexpr int kLightMaxRowThreads = 512;
inline constexpr int kLightMaxRowThreadsFast = 256;
inline constexpr std::int64_t kFastMemoryGbps = 4000;
// Forward rows of kTwoPassMinHidden elements up to kTwoPassMaxRowBytes bytes stream through the
// two-pass kernel (its second read hits L2), with 2 packs in flight a thread up to
// kTwoPassUnroll2MaxRowBytes, else 4.
inline constexpr std::int64_t kTwoPassMinHidden = 24576;
inline constexpr std::int64_t kTwoPassMaxRowBytes = 131072;
inline constexpr std::int64_t kTwoPassUnroll2MaxRowBytes = 49152;
// dW partial rows: at most kMaxDwGroups, and no more than kMaxDwPartialBytes of partials unless
// that leaves fewer than kMinDwGroups; each group over at least kMinRowsPerDwGroup rows and
// kMinElementsPerDwGroup elements. The partials are written once and read once: 8 / (6 * rows a
// group) of a bf16 backward's traffic, so long rows take fewer, longer groups.
inline constexpr std::int64_t kMaxDwGroups = 512;
inline constexpr std::int64_t kMaxDwPartialBytes = std::int64_t{8} << 20;
inline constexpr std::int64_t kMinDwGroups = 64;
inline constexpr std::int64_t kMinRowsPerDwGroup = 8;
inline constexpr std::int64_t kMinElementsPerDwGroup = 8192;
// The group count is rounded down to whole waves of the register backward on a GPU of this many
// SMs: a constant rather than the device's count, so that dW has the same bits on every GPU.
inline constexpr int kDwWaveSms = 132;
// The dW finishing kernel adds rows of at least kFinishVectorMinHidden elements 4 columns a
// thread with 16-byte loads (same terms, same order), shorter ones one column a thread.
inline constexpr std::int64_t kFinishVectorMinHidden = 32768;

// One row's share of threads. Threads [k * threads_per_row, (k + 1) * threads_per_row) of a block
// work on row slot k; with slices > 1, a cluster of `slices` CTAs splits each row into column
// slices of slice_packs packs (rank c: packs [c * slice_packs, (c + 1) * slice_packs)).
struct RowSplit {
  std::int64_t packs = 0;   // packs per row
  int threads_per_row = 1;  // a power of two up to 64, else a multiple of 32 (then one row a block)
  int slices = 1;           // CTAs per row; 1 without a cluster
  int slice_packs = 0;
  int block_threads = 0;
  bool two_pass = false;  // streamed by the two-pass kernels (too long for registers, or by choice)
};

// Backward dW: rows are cut into `groups` runs of rows_per_group consecutive rows (the last may be
// shorter); one CTA (or cluster) reduces a run in a fixed order into one float32 row of partials,
// and a second kernel adds the partial rows in order. Both numbers depend on the shape alone, so
// dW has the same bits whatever the GPU, grid or timing.
struct DwGroups {
  std::int64_t rows_per_group = 0;
  std::int64_t groups = 0;
};

inline constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

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

// What split_row needs to know besides the row length.
struct SplitPolicy {
  int packs_per_thread = 1;
  int block_threads = 128;          // target block size when rows are short enough to share one
  int cluster_slice_threads = 256;  // 0: no clusters
  bool two_pass = false;            // stream the row (two-pass kernels) whatever its length
  int clustered_slice_threads = 0;  // slices of a row over a cluster (0: cluster_slice_threads)
  int clustered_above = 1;  // ... for rows cluster_slice_threads splits over more CTAs than this
};

// Spreads `packs` packs per row over threads holding packs_per_thread packs each; rows longer than
// cluster_slice_threads threads are split over a cluster where clusters are available (in slices of
// at most clustered_slice_threads threads, if set), and rows still too long for registers are
// streamed by the two-pass kernels.
inline RowSplit split_row(std::int64_t packs, const SplitPolicy& policy) {
  RowSplit split;
  split.packs = packs;
  const std::int64_t threads = ceil_div(packs, policy.packs_per_thread);
  const auto slices_of = [&](std::int64_t slice_threads) {
    int slices = 1;
    while (slices < kMaxClusterSize && ceil_div(threads, slices) > slice_threads) slices *= 2;
    return slices;
  };
  int slices = 1;
  if (policy.cluster_slice_threads > 0 && threads > policy.cluster_slice_threads) {
    slices = slices_of(policy.cluster_slice_threads);
    if (policy.clustered_slice_threads > 0 && slices > policy.clustered_above) {
      slices = slices_of(std::min(policy.clustered_slice_threads, policy.cluster_slice_threads));
    }
  }
  const std::int64_t slice_packs = ceil_div(packs, slices);
  const std::int64_t slice_threads = ceil_div(threads, slices);
  if (policy.two_pass || slice_threads > kMaxRowThreads) {
    split.two_pass = true;
    split.threads_per_row = kTwoPassThreads;
    split.block_threads = kTwoPassThreads;
    return split;
  }
  split.slices = slices;
  split.slice_packs = static_cast<int>(slice_packs);
  split.threads_per_row = row_threads_for(slice_threads);
  // Several rows a block only without a cluster: a cluster reduces one row over its CTAs.
  const int target = std::min(policy.block_threads, kMaxRowThreads);
  split.block_threads = slices > 1 || split.threads_per_row >= target
                            ? split.threads_per_row
                            : target / split.threads_per_row * split.threads_per_row;
  return split;
}

// 128 registers a thread, the register backward's launch bound and what its 16-byte kernels with a
// weight use (cuobjdump), leave room for 16 warps an SM.
inline constexpr int kBwdWarpsPerSm = 16;

// The register backward's row split for rows of `packs` packs (two_pass: rows too long for
// registers and the largest cluster).
inline RowSplit bwd_split(std::int64_t packs) {
  return split_row(packs, {kBwdPacksPerThread, kBlockThreads, kClusterSliceThreads, false,
                           kClusteredSliceThreads, kBwdClusteredAbove});
}

// dW groups the register backward runs at once on a GPU of `sms` SMs with rows split as `split`:
// CTAs an SM by the warps each needs, over the CTAs of a cluster (2-CTA clusters pair the two SMs
// of a TPC). Larger clusters must fit within one GPC, and a GPC's SMs rarely divide evenly into
// them, so fewer are resident: 30 clusters of 8 two-per-SM CTAs on a 132-SM H100 (2026-12-06),
// where 132 * 2 / 8 = 33 would fit without GPCs; they take 10/11 of the count. 0 for the two-pass
// kernel.
inline std::int64_t dw_wave_units(const RowSplit& split, int sms) {
  if (sms <= 0 || split.two_pass) return 0;
  const int warps = static_cast<int>(ceil_div(split.block_threads, 32));
  const std::int64_t ctas = std::int64_t{sms} * std::max(1, kBwdWarpsPerSm / warps);
  return split.slices <= 2 ? ctas / split.slices : ctas * 10 / (11 * split.slices);
}

// The dW groups of a backward over rows of `hidden` elements of `x_size` bytes: as few groups of
// equal length as keep within the caps above, the cap rounded down to whole waves of the 16-byte
// clustered split (whatever the pointers' alignment or the device). A function of the shape and
// the dtype alone, and so are dW's bits.
inline DwGroups dw_groups(std::int64_t rows, std::int64_t hidden, int x_size) {
  if (rows <= 0 || hidden <= 0) return {};
  const std::int64_t by_bytes =
      std::max(kMinDwGroups, kMaxDwPartialBytes / (hidden * std::int64_t{sizeof(float)}));
  std::int64_t cap = std::min(kMaxDwGroups, by_bytes);
  const std::int64_t wave = dw_wave_units(bwd_split(ceil_div(hidden * x_size, 16)), kDwWaveSms);
  if (wave > 0 && cap >= wave) cap = cap / wave * wave;
  const std::int64_t per_group =
      std::max({ceil_div(rows, cap), kMinRowsPerDwGroup, ceil_div(kMinElementsPerDwGroup, hidden)});
  return {per_group, ceil_div(rows, per_group)};
}

// Floats of dW partials a backward needs (none without a weight).
inline std::int64_t dw_partial_floats(std::int64_t rows, std::int64_t hidden, int x_size,
                                      bool has_weight) {
  return has_weight ? dw_groups(rows, hidden, x_size).groups * hidden : 0;
}

// What a launch config depends on besides the shape: the device's facts (device_properties.h).
// The row split never does: a GPU without clusters runs the same slices (SlicePass).
struct DeviceTraits {
  bool clusters = false;     // sm_90 clusters may be launched
  bool fast_memory = false;  // peak DRAM bandwidth of at least kFastMemoryGbps
};

// The forward kernels: 8 packs a thread (rms_norm_fwd_kernel<..., kFwdPacksPerThread>), the light
// one (kLightPacksPerThread packs), or the two-pass streaming kernel.
enum class FwdKernel { kRows, kLightRows, kTwoPass };

// Rows split over slices on a GPU without clusters (slice_pass.h): each CTA's sum over its slice
// goes through [rows, slices] floats of workspace. One more read of the row than with a cluster,
// as many as the two-pass kernels these rows took there before.
struct SliceSums {
  float* sums = nullptr;  // [rows, slices]; null with kCluster
  SlicePass pass = SlicePass::kCluster;
};

// Floats of slice sums a launch with `slice_sums` needs.
inline std::int64_t slice_sum_floats(std::int64_t rows, const RowSplit& split, bool slice_sums) {
  return slice_sums ? rows * split.slices : 0;
}

struct FwdConfig {
  FwdKernel kernel = FwdKernel::kRows;
  RowSplit split;
  // Light kernel: the row's upper half of threads adds its sums onto the lower half before the
  // row's reduction, which is then the 8-pack kernel's (light_pairs_with_rows).
  bool fold_half = false;
  int two_pass_unroll = 4;  // packs in flight a thread of the two-pass kernel: 2 or 4
  bool slice_sums = false;  // the split's slices run without a cluster (SlicePass)
};

// The 8-pack kernel's split of rows of `packs` packs of `pack` elements, `x_size` bytes each.
inline RowSplit rows_split(std::int64_t packs, std::int64_t hidden, int x_size,
                           int packs_per_thread = kFwdPacksPerThread) {
  const bool two_pass = hidden >= kTwoPassMinHidden && hidden * x_size <= kTwoPassMaxRowBytes;
  return split_row(packs, {packs_per_thread, kBlockThreads, kClusterSliceThreads, two_pass,
                           kClusteredSliceThreads, 1});
}

// Whether the light split `light` of a row and the 8-pack split `rows` give the same sums in the
// same order: one row a CTA, no cluster, and twice the 8-pack kernel's threads. Thread t of the
// 8-pack kernel holds packs t + k * T (k < 8); its even k are the light thread t's packs and its
// odd k the light thread t + T's, which it sums apart and then adds (normalize_row).
inline bool light_pairs_with_rows(const RowSplit& light, const RowSplit& rows) {
  return !rows.two_pass && rows.slices == 1 && light.slices == 1 &&
         light.threads_per_row == light.block_threads &&
         rows.threads_per_row == rows.block_threads &&
         light.threads_per_row == 2 * rows.threads_per_row;
}

// The forward's launch config for rows of `hidden` elements of `x_size` bytes read in packs of
// `pack` elements (16 bytes, or 1 on the scalar path), on a device with traits `d`. Every choice
// that `d` can change gives the same bits (tests/cuda force each one).
inline FwdConfig fwd_config(std::int64_t hidden, int pack, int x_size, DeviceTraits d) {
  FwdConfig c;
  c.split = rows_split(hidden / pack, hidden, x_size);
  c.slice_sums = !d.clusters && c.split.slices > 1;
  if (c.split.two_pass) {
    c.kernel = FwdKernel::kTwoPass;
    c.two_pass_unroll = hidden * x_size <= kTwoPassUnroll2MaxRowBytes ? 2 : 4;
    return c;
  }
  // Light kernel: 16-bit x on the 16-byte path only (as the float32 default its other summation
  // order moved the olmo2 float32 convergence test past its tolerance, 2026-12-05).
  if (pack == 1 || x_size != 2) return c;
  const RowSplit light = rows_split(hidden / pack, hidden, x_size, kLightPacksPerThread);
  if (light.two_pass || light.slices != 1 || light.threads_per_row > kLightMaxRowThreads) return c;
  const bool pairs = light_pairs_with_rows(light, c.split);
  if (d.fast_memory && pairs && light.threads_per_row > kLightMaxRowThreadsFast) return c;
  c.kernel = FwdKernel::kLightRows;
  c.split = light;
  c.fold_half = pairs;
  return c;
}

struct BwdConfig {
  RowSplit split;
  DwGroups groups;
  bool prefetch = false;    // L2 prefetch of the next row block (rows over clusters)
  bool slice_sums = false;  // the split's slices run without a cluster (SlicePass)
};

inline BwdConfig bwd_config(std::int64_t rows, std::int64_t hidden, int pack, int x_size,
                            DeviceTraits d) {
  BwdConfig c;
  c.split = bwd_split(hidden / pack);
  c.slice_sums = !d.clusters && c.split.slices > 1;
  c.groups = dw_groups(rows, hidden, x_size);
  c.prefetch = c.split.slices > 1;
  return c;
}

// The dW finishing kernel's column tile (8 columns for rows of up to 2048 elements: more CTAs for
// short rows, else 32) and whether it reads 4 columns a thread (16-byte loads, where the
// partials' alignment allows: rms_norm.cu checks that).
struct FinishConfig {
  int columns = 32;
  bool vector = false;
};

inline FinishConfig finish_config(std::int64_t hidden) {
  return {hidden <= 2048 ? 8 : 32, hidden >= kFinishVectorMinHidden};
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
  bool fold_half = false;  // light kernel: FwdConfig::fold_half
  SliceSums slice_sums;
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
  bool prefetch = false;  // BwdConfig::prefetch
  SliceSums slice_sums;
};

// fused_add_rms_norm's kernels (kResidual): RMSNorm's parameters and the residual's. Plain
// RMSNorm's kernels take FwdParams / BwdParams themselves, so their parameters, and with them
// their machine code, are what they were without the fused op.
struct ResidualFwdParams : FwdParams {
  const void* residual = nullptr;  // the row normalized is h = x + residual, stored to h
  std::int64_t residual_row_stride = 0;
  void* h = nullptr;
  std::int64_t h_row_stride = 0;
};

struct ResidualBwdParams : BwdParams {
  // x is h, and dx = dh + the norm's dx. dh may be dx (in place), so like dy it is never read
  // through the read-only path.
  const void* dh = nullptr;
  std::int64_t dh_row_stride = 0;
};

template <bool kResidual>
using FwdParamsOf = std::conditional_t<kResidual, ResidualFwdParams, FwdParams>;
template <bool kResidual>
using BwdParamsOf = std::conditional_t<kResidual, ResidualBwdParams, BwdParams>;

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
