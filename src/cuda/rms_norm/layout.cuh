// How rows are spread over threads, CTAs and clusters, and how backward groups rows into dW
// partials. The launcher decides (host functions below); kernels read the structs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "math/rms_norm.h"

namespace tigon::cuda::rms_norm {

// Packs (vectors of P elements; P = 16 bytes of x, or 1 on the scalar path) each thread keeps in
// registers, so a row is read from memory exactly once. The forward holds x; the backward holds
// x, dy and float32 dW accumulators, hence fewer per thread.
inline constexpr int kFwdPacksPerThread = 8;
// The light forward kernel with this many packs a thread loads a 16-bit weight before the row's
// reduction (K more packs of registers: within its 64 without spilling, where a float32 weight or
// the 2-pack kernel's 40 would spill).
inline constexpr int kFwdWeightEarlyPacks = 4;
inline constexpr int kBwdPacksPerThread = 4;
inline constexpr int kMaxRowThreads = 512;   // launch bound of the register kernels
inline constexpr int kMaxClusterSize = 8;    // the portable cluster size limit
inline constexpr int kTwoPassThreads = 512;  // block size of the two-pass (streaming) kernels

// The launch choices that change speed only (and, for the backward, the fixed order in which dW
// terms are added, which stays a function of the shape). The defaults come from tuning runs on
// an H200 (docs/benchmarks.md); a developer can override any of them for one process through
// TIGON_RMS_NORM_TUNING="key=value,..." (keys as named below), which tools/tune_rms_norm.py uses.
struct Tuning {
  int fwd_block_threads = 128;      // rows share a forward block up to this many threads
  int bwd_block_threads = 128;      // same for the backward
  int cluster_slice_threads = 512;  // past this many threads a row, split it over a cluster
  // Rows split over a cluster take slices of at most these many threads (0: cluster_slice_threads):
  // smaller CTAs, two an SM, so that one CTA's loads are in flight while the other reduces its row
  // (a 512-thread backward CTA, 128 registers a thread, fills an SM alone). The backward's only for
  // rows that cluster_slice_threads alone splits over more than bwd_cluster_slice_above CTAs:
  // moving 2-CTA rows to 4 cost it (H100, 2026-12-06: 83 to 59% of the copy ceiling at bf16
  // 4096 x 32768, 79 to 62% at 8192 x 24576). With bwd_prefetch=2, the defaults against none of
  // the three (same H100 sweep, forward / backward %): 1024 x 65536 73/65 against 68/55, 2048 x
  // 49152 75/66 against 75/54 (a two-pass forward row), 8192 x 24576 89/85 against 89/79,
  // 4096 x 32768 93/80 against 93/83; rows one CTA holds unchanged. On an H200 (same day) the
  // backward gained 4-8 points on every one of those rows (32768: 72 against 68%), and
  // bwd_cluster_slice_above=1 cost 15-23 at 24576 and 32768.
  int fwd_cluster_slice_threads = 256;
  int bwd_cluster_slice_threads = 256;
  int bwd_cluster_slice_above = 2;
  bool clusters = true;  // use sm_90 clusters where the device has them
  // The light forward kernel (fwd_light_packs_per_thread packs a thread, 4 or 2, the weight
  // loaded before the reduction) for rows one CTA holds that way with at most this many threads
  // (0: never), on the 16-byte vector path of 16-bit x: more, lighter CTAs. With 4 packs (bf16
  // H <= 16384 at 512 threads) it is 2-13 points of the copy ceiling faster than the 8-pack kernel
  // on an H200 at 16384 rows x 1024-8192, and on an H100 10 points faster at 8192 x 16384 (96%);
  // past one CTA (clusters) it is slower (docs/benchmarks.md, 2026-12-05).
  int fwd_light_max_row_threads = kMaxRowThreads;
  int fwd_light_packs_per_thread = 4;
  // GPUs whose peak DRAM bandwidth (memory clock x bus width, device attributes) is at least
  // fast_memory_gbps cap the light kernel at fwd_light_max_row_threads_fast_memory threads a row:
  // an H200 (4.9 TB/s) ran bf16 H 16384 at 84-86% of the copy ceiling with the 8-pack kernel
  // (256 threads) against 75-78% with the light one (512 threads), where an H100 (3.35 TB/s) ran
  // 95-96% against 87-88% (2026-12-06; docs/benchmarks.md).
  std::int64_t fast_memory_gbps = 4000;
  int fwd_light_max_row_threads_fast_memory = 256;
  // At least this many threads a row (fewer packs each) where the row has enough packs: short
  // rows then spread over more, lighter CTAs.
  int fwd_min_row_threads = 1;
  int bwd_min_row_threads = 1;
  // Forward rows of at least fwd_two_pass_min_hidden elements and at most
  // fwd_two_pass_max_row_bytes bytes of x take the streaming two-pass kernel, whose second read of
  // a row hits L2 while the rows its resident CTAs read fit there. With fwd_two_pass_l2_hints the
  // first read marks the row "evict last" in L2 and the second "evict first" (l2_policy.cuh), so
  // the y stores do not push rows still to be re-read out. % of the copy ceiling on an H100
  // (2026-12-06), the register or cluster kernel / two-pass with hints: bf16 H 20480 85 / 84,
  // 24576 89 / 92, 32768 92 / 94, 40960 81 / 85, 49152 75 / 83, 65536 72-74 / 75-76, 131072 (256 KB
  // rows) 72 / 65; without hints the two-pass kernel lost at 65536 (67 against 74, 2026-12-05).
  // The GPU tests ran it on an H100 (the TwoPassForward sizes, the AllTwoPass ctest variant).
  std::int64_t fwd_two_pass_min_hidden = 24576;
  std::int64_t fwd_two_pass_max_row_bytes = 131072;
  bool fwd_two_pass_l2_hints = true;
  // Packs in flight per thread in the two-pass forward: 4 (62 registers, two 512-thread CTAs an SM:
  // 50% occupancy) or 2 (40 registers, three CTAs: a third more rows resident, so a third more of
  // them to keep in L2 for their second read); 0: 2 for rows of at most
  // fwd_two_pass_unroll2_max_row_bytes, else 4. Inductor's kernel for the same rows keeps twice
  // our warps resident and reaches 88% of DRAM peak against our 83% (ncu, H100, 4096 x 32768,
  // 2026-12-06). 2 against 4, % of the copy ceiling (2026-12-06): bf16 H 24576 (48 KB rows) H100
  // 94 against 92, H200 82 against 75-76; H 32768 H100 -10, H200 +1; 49152-65536 H100 -8 to -13,
  // H200 -4 to -8.
  int fwd_two_pass_unroll = 0;
  std::int64_t fwd_two_pass_unroll2_max_row_bytes = 49152;
  // 1024: the two-pass forward in 1024-thread CTAs with one pack a thread in flight (32
  // registers, two CTAs an SM, Inductor's shape for these rows), whatever fwd_two_pass_unroll says;
  // 512: as above. On the H200 Inductor's forward reaches 98-101% of the copy ceiling at bf16
  // H 16384-32768 against our 77-83% (2026-12-06). Off: on an H100 (2026-12-06, the tests passed on
  // it) it lost 10 and 8 points at bf16 8192 x 24576 and 4096 x 32768 (84 and 86% against 94),
  // and 3 at 1024 x 65536; rows shorter than a CTA's 1024 packs idle most of its threads.
  int fwd_two_pass_threads = kTwoPassThreads;
  // Backward rows of at least this many elements take the streaming two-pass kernel (on an H100
  // from 32768 it took 4096 x 32768 from 71% to 42%: off). It re-reads dy and x per chunk of 32
  // rows, one CTA a dW group; L2 hints with chunks of 1 or 2 rows and 264 groups did not save it
  // (H100, 2026-12-06: 30-45% at H 24576-65536).
  std::int64_t bwd_two_pass_min_hidden = std::int64_t{1} << 62;
  // Staged kernels (x, and dy in the backward, through a shared-memory ring of this many row
  // blocks on a persistent grid; 0: the register kernels, which load rows straight into registers).
  // Off by default: slower than the register kernels on an H100 and an H200 with cp.async, and
  // on an H100 with bulk copies (2026-12-06; docs/ops/rms_norm.md).
  int fwd_stages = 0;
  int bwd_stages = 0;
  // The register backward asks L2 for the next row block's dy and x (prefetch.global.L2) once the
  // current one's loads are issued, so memory stays busy through the row's reduction and dx:
  // 1 every row, 2 rows over clusters only, 0 off. On an H100 (2026-12-05 late, with the cluster
  // exchange) it gained 2-6 points of the copy ceiling on rows over clusters of 2-4 CTAs (H 24576,
  // 49152, 65536), lost 3 at 32768 and 4-7 on rows one CTA holds (16384 x 1024 and 4096); with
  // the 256-thread slices above (2026-12-06) 2 gained 5 at 24576, 8 at 49152 and 3 at 65536.
  int bwd_prefetch = 2;
  // The register forward runs on a persistent grid (the CTAs or clusters resident at once)
  // instead of one launch a row block, and each CTA (cluster) asks L2 for its next row block once
  // the current one's loads are issued, as bwd_prefetch does: 1 for rows over clusters, 2 for
  // every row, 0 off. Off: on an H100 (2026-12-05 late) 1 cost the forward 2-4 points of the copy
  // ceiling at bf16 H 49152 and 65536, and 2 cost 10-24 points at H 4096-32768.
  int fwd_prefetch = 0;
  // Rows over a cluster add their CTAs' sums through an mbarrier exchange (cluster_exchange.cuh:
  // each CTA pushes its sum into every CTA with st.async, each waits for its own to land) instead
  // of a cluster barrier, which compiles to a GPU-scope fence (MEMBAR.ALL.GPU: every thread waits
  // for its previous row's stores) and an L1 invalidation, once a row. Same sums, same bits. On
  // an H100 (2026-12-05 late) the backward went from 51 to 58% of the copy ceiling at 8192 x
  // 24576, 76 to 83% at 4096 x 32768, 48 to 54% at 2048 x 49152 and 49 to 55% at 1024 x 65536,
  // the forward at 1024 x 65536 from 65 to 68%; rows without a cluster do not use it.
  bool cluster_exchange = true;
  // dW partial rows: at most max_dw_groups of them, and no more than max_dw_partial_bytes of
  // partials unless that leaves fewer than min_dw_groups; each group over at least
  // min_rows_per_dw_group rows and min_elements_per_dw_group elements. The partials are written
  // once and read once: 8 / (6 * rows per group) of a bf16 backward's traffic, 17% at 8 rows, so
  // long rows (fewer, larger CTAs anyway) take fewer, longer groups.
  std::int64_t max_dw_groups = 512;
  std::int64_t max_dw_partial_bytes = std::int64_t{8} << 20;
  std::int64_t min_dw_groups = 64;
  std::int64_t min_rows_per_dw_group = 8;
  std::int64_t min_elements_per_dw_group = 8192;
  // Round the number of dW groups down to whole waves of the register backward on a GPU of this
  // many SMs (0: off), where a wave is known from the row split alone (dw_wave_units). Each group
  // is one CTA (or cluster) working through its rows in order, so 85 groups of 2-CTA clusters on
  // 132 SMs (bf16 8192 x 24576) ran in two waves, the second a third full: 66 groups of more rows
  // take one. A constant rather than the device's count, so that dW keeps the same bits on every
  // GPU. It changes no power-of-two bf16 row length at the defaults (their group counts are
  // already within a wave's), only rows such as 4608, 5120, 6144, 12288, 20480 and 24576
  // elements. On an H100 (132 SMs, 2026-12-05 late) it took the backward from 64 to 87% of the copy
  // ceiling at 16384 x 5120, 66 to 85% at 16384 x 6144 and 51 to 73% at 8192 x 24576, and left
  // every other swept shape within a point.
  int dw_wave_sms = 132;
  // Columns a CTA of the dW finishing kernel adds (8, 16 or 32; dw_finish.cuh), or 0: 8 for
  // rows of up to 2048 elements, else 32. Fewer give short rows more CTAs (H 1024: 32 CTAs at 32
  // columns), at the price of shorter memory segments: on an H200, 8 took the 4096x1024 backward
  // from 29% to 32% of the copy ceiling and 1024x65536 from 35% to 30%.
  int finish_columns = 0;
  // Rows of at least this many elements have the finishing kernel add 4 adjacent columns a thread
  // with 16-byte loads (same bits, a quarter of the threads: more CTAs resident, fewer
  // instructions); shorter rows its scalar form (0: every row the vector form). Under Nsight
  // Compute on an H100 the scalar kernel took 6.0 us of the 4096 x 1024 backward (30%) and 18.8 us
  // of 1024 x 65536's (9%), latency-bound. The vector form, % of the copy ceiling (backward):
  // H100 (2026-12-06) +1 at bf16 4096 x 32768, +2 at 2048 x 49152, +3 at 1024 x 65536 (74
  // against 71), -5 to -7 at H 1024; H200 (2026-12-06) +2-3 at 65536, +1 at 49152, 0-2 at 32768,
  // 0 at 24576, -4 at 16384 x 1024 and 4096 x 1024.
  std::int64_t finish_vector_min_hidden = 32768;
};

// The process's tuning: the defaults above, or TIGON_RMS_NORM_TUNING's (read once; tuning.cpp).
const Tuning& tuning();

// The defaults with the options of environment variable `variable` applied ("key=value,..."; the
// keys of Tuning). An unknown key or a value out of its range throws an Error naming the variable,
// the key, what was expected and what was given.
Tuning tuning_from_environment(std::string_view variable);

// One row's share of threads. Threads [k * threads_per_row, (k + 1) * threads_per_row) of a block
// work on row slot k; with slices > 1, a cluster of `slices` CTAs splits each row into column
// slices of slice_packs packs (rank c: packs [c * slice_packs, (c + 1) * slice_packs)).
struct RowSplit {
  std::int64_t packs = 0;   // packs per row
  int threads_per_row = 1;  // a power of two up to 64, else a multiple of 32 (then one row a block)
  int slices = 1;           // CTAs per row; 1 without a cluster
  int slice_packs = 0;
  int block_threads = 0;
  bool two_pass = false;  // streamed by the two-pass kernels (too long, or by the tuning)
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
  int min_row_threads = 1;          // at least this many threads a row, where it has the packs
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
  const std::int64_t threads = std::max(ceil_div(packs, policy.packs_per_thread),
                                        std::min<std::int64_t>(policy.min_row_threads, packs));
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

// Forward rows of `hidden` elements of `x_size` bytes that take the two-pass kernel by the
// tuning (longer rows than registers and clusters hold take it anyway: split_row).
inline bool fwd_two_pass(std::int64_t hidden, int x_size, const Tuning& t) {
  return hidden >= t.fwd_two_pass_min_hidden && hidden * x_size <= t.fwd_two_pass_max_row_bytes;
}

// Packs in flight per thread of the two-pass forward for rows of `hidden` elements of `x_size`
// bytes: 2 or 4 (Tuning::fwd_two_pass_unroll).
inline int fwd_two_pass_unroll_for(std::int64_t hidden, int x_size, const Tuning& t) {
  if (t.fwd_two_pass_unroll != 0) return t.fwd_two_pass_unroll;
  return hidden * x_size <= t.fwd_two_pass_unroll2_max_row_bytes ? 2 : 4;
}

inline SplitPolicy fwd_policy(std::int64_t hidden, int x_size, bool clusters, const Tuning& t,
                              int packs_per_thread = kFwdPacksPerThread) {
  return {packs_per_thread,
          t.fwd_block_threads,
          clusters && t.clusters ? t.cluster_slice_threads : 0,
          fwd_two_pass(hidden, x_size, t),
          t.fwd_min_row_threads,
          t.fwd_cluster_slice_threads};
}

inline SplitPolicy bwd_policy(std::int64_t hidden, bool clusters, const Tuning& t) {
  return {kBwdPacksPerThread,
          t.bwd_block_threads,
          clusters && t.clusters ? t.cluster_slice_threads : 0,
          hidden >= t.bwd_two_pass_min_hidden,
          t.bwd_min_row_threads,
          t.bwd_cluster_slice_threads,
          t.bwd_cluster_slice_above};
}

// 128 registers a thread, the register backward's launch bound and what its 16-byte kernels with a
// weight use (cuobjdump), leave room for 16 warps an SM.
inline constexpr int kBwdWarpsPerSm = 16;

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

// At most this many dW groups for rows of `hidden` elements: max_dw_groups, and the partial rows
// within max_dw_partial_bytes unless that leaves fewer than min_dw_groups.
inline std::int64_t dw_group_cap(std::int64_t hidden, const Tuning& t) {
  const std::int64_t by_bytes =
      std::max(t.min_dw_groups, t.max_dw_partial_bytes / (hidden * std::int64_t{sizeof(float)}));
  return std::min(t.max_dw_groups, by_bytes);
}

// `rows` rows in as few groups of equal length as keep within `cap` groups and the tuning's
// least rows and elements a group.
inline DwGroups dw_groups_within(std::int64_t rows, std::int64_t hidden, std::int64_t cap,
                                 const Tuning& t) {
  if (rows <= 0 || hidden <= 0) return {};
  const std::int64_t per_group = std::max({ceil_div(rows, cap), t.min_rows_per_dw_group,
                                           ceil_div(t.min_elements_per_dw_group, hidden)});
  return {per_group, ceil_div(rows, per_group)};
}

// The dW groups of a backward over rows of `hidden` elements of `x_size` bytes. The wave fit
// (Tuning::dw_wave_sms) reads the row split of 16-byte packs with clusters, whatever the pointers'
// alignment or the device, so the groups, and dW's bits, depend on the shape, the dtype and the
// tuning alone.
inline DwGroups dw_groups(std::int64_t rows, std::int64_t hidden, int x_size, const Tuning& t) {
  if (rows <= 0 || hidden <= 0) return {};
  std::int64_t cap = dw_group_cap(hidden, t);
  if (t.dw_wave_sms > 0) {
    const std::int64_t packs = ceil_div(hidden * x_size, 16);
    const std::int64_t wave =
        dw_wave_units(split_row(packs, bwd_policy(hidden, true, t)), t.dw_wave_sms);
    if (wave > 0 && cap >= wave) cap = cap / wave * wave;
  }
  return dw_groups_within(rows, hidden, cap, t);
}

// The finishing kernel's column tile for rows of `hidden` elements.
inline int finish_columns(std::int64_t hidden, const Tuning& t) {
  if (t.finish_columns != 0) return t.finish_columns;
  return hidden <= 2048 ? 8 : 32;
}

// Whether the finishing kernel takes 4 columns a thread (16-byte loads) for rows of `hidden`
// elements, where the partials' alignment allows (rms_norm.cu checks that).
inline bool finish_vector(std::int64_t hidden, const Tuning& t) {
  return hidden >= t.finish_vector_min_hidden;
}

// The most threads a row of the light forward kernel on a GPU of `memory_gbps` peak DRAM
// bandwidth (0: never the light kernel).
inline int light_fwd_max_row_threads(std::int64_t memory_gbps, const Tuning& t) {
  return memory_gbps >= t.fast_memory_gbps
             ? std::min(t.fwd_light_max_row_threads, t.fwd_light_max_row_threads_fast_memory)
             : t.fwd_light_max_row_threads;
}

// The light forward kernel's split of `packs` packs a row, where one CTA holds the row that way
// (no cluster, no two passes) in at most max_row_threads threads
// (light_fwd_max_row_threads); else packs == 0 in the result (also when that limit is 0) and the
// 8-pack kernel serves the rows.
inline RowSplit light_fwd_split(std::int64_t packs, std::int64_t hidden, int x_size, bool clusters,
                                int max_row_threads, const Tuning& t) {
  if (max_row_threads == 0) return {};
  const RowSplit s =
      split_row(packs, fwd_policy(hidden, x_size, clusters, t, t.fwd_light_packs_per_thread));
  const bool fits = !s.two_pass && s.slices == 1 && s.threads_per_row <= max_row_threads;
  return fits ? s : RowSplit{};
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
  int stages = 0;                 // staged kernel: row blocks in its shared-memory ring
  bool prefetch = false;          // register kernel: Tuning::fwd_prefetch
  bool cluster_exchange = false;  // Tuning::cluster_exchange
  bool l2_hints = false;          // two-pass kernel: Tuning::fwd_two_pass_l2_hints
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
  int stages = 0;                 // staged kernel: row blocks in its shared-memory ring
  bool prefetch = false;          // register kernel: Tuning::bwd_prefetch
  bool cluster_exchange = false;  // Tuning::cluster_exchange
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
