// Which rows the one-read slice kernel (slice_kernel.cuh) takes, and how it splits them: the
// smallest cluster whose slices fit the shared memory of three CTAs per SM, else the largest
// cluster if its slices fit two per SM. Other rows run the two-pass row kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ops/cross_entropy_args.h"

namespace tigon::cuda::cross_entropy {

inline constexpr std::size_t kSliceBytes = 64 * 1024;      // three CTAs per SM (228 KB)
inline constexpr std::size_t kMaxSliceBytes = 100 * 1024;  // two CTAs per SM
inline constexpr int kMaxCluster = 8;                      // the portable cluster size limit
// Rows whose slice plan needs clusters larger than this run the two-pass row kernel instead (bf16
// V > 65536, fp32 V > 32768): with L2 eviction hints and a reversed second pass, so that more of
// its re-read hits in L2, it is the faster one there (H200, bf16 forward + gradient in place,
// 8192 x 128256: 1.34 vs 1.68 ms; 4096 x 256000: 1.44 vs 1.72 ms). Loss-only rows follow the same
// rule, so that a loss has the same bits with and without its gradient.
inline constexpr int kRowKernelAboveCluster = 2;
inline constexpr std::size_t kSlicePackBytes = 16;  // the slice kernel's pack

struct SlicePlan {
  int cluster = 0;  // CTAs per row (a thread-block cluster when > 1); 0: rows the kernel skips
  std::int64_t slice_packs = 0;  // 16-byte packs of a row per CTA (the last CTA may have fewer)
  // Rows a CTA holds at once: 2 streams the next row in while the current one is computed, so a
  // row's first pass never waits on copies issued only just before (the second pass of the row
  // before); 1 refills a row's slots only as they are consumed.
  int stages = 1;
  std::size_t smem_bytes() const {
    return static_cast<std::size_t>(slice_packs) * kSlicePackBytes *
           static_cast<std::size_t>(stages);
  }
};

// Rows of `packs` 16-byte packs, clusters of up to `max_cluster` CTAs (1 without clusters),
// `stages` rows per CTA whose slices together fit `slice_bytes` (else one stage). One stage:
// bf16 rows V <= 32768 one CTA, <= 65536 two, <= 131072 four (V = 128256: 62.6 KB slices),
// <= 262144 eight (256000: 62.5 KB); fp32 rows: half those; then eight CTAs up to 100 KB slices.
// Two stages: half the slice per stage, e.g. V = 128256 on eight CTAs, 2 x 31.3 KB.
inline SlicePlan slice_plan(std::int64_t packs, int max_cluster,
                            std::size_t slice_bytes = kSliceBytes, int stages = 1) {
  const auto slice = [&](int c) { return (packs + c - 1) / c; };
  const std::size_t stage_bytes = slice_bytes / static_cast<std::size_t>(stages);
  for (int c = 1; c <= max_cluster; c *= 2) {
    if (static_cast<std::size_t>(slice(c)) * kSlicePackBytes <= stage_bytes)
      return {c, slice(c), stages};
  }
  if (stages > 1) return slice_plan(packs, max_cluster, slice_bytes, 1);
  int largest = 1;
  while (largest * 2 <= max_cluster) largest *= 2;
  if (static_cast<std::size_t>(slice(largest)) * kSlicePackBytes <= kMaxSliceBytes)
    return {largest, slice(largest), 1};
  return {};
}

// TIGON_CROSS_ENTROPY_TUNING, a developer's override for one process (A/B runs without a
// rebuild): slices=0 runs every row on the two-pass row kernel; max_cluster=1|2|4|8 bounds the
// plan's clusters; row_above=1|2|4|8 sends rows whose plan has larger clusters to the row kernel
// (default 2; 8: the slice kernel wherever it fits); slice_kb=K prefers slices up to K KB (default
// 64, at most 100); stages=1|2 rows per CTA; cluster_exchange=0|1 (default 0) for the slice
// kernel; for the row kernel l2_hints=0|1 and reverse=0|1 (RowParams, default 1). Read once;
// malformed values are errors.
struct SliceTuning {
  bool slices = true;
  int max_cluster = kMaxCluster;
  int row_kernel_above_cluster = kRowKernelAboveCluster;
  std::size_t slice_bytes = kSliceBytes;
  int stages = 1;
  bool l2_hints = true;
  bool reverse_second_pass = true;
  // prepare -> rows -> finish as programmatic dependent launches (sm_90; key dependent=0|1).
  bool dependent_launches = true;
  // The slice kernel's clusters fold each row's state through the mbarrier exchange
  // (cluster_exchange.cuh) instead of a cluster barrier, whose GPU-scope fence (MEMBAR.ALL.GPU)
  // makes every thread wait once a row for its earlier stores (key cluster_exchange=0|1; off until
  // it has passed the GPU tests and been measured; same bits).
  bool cluster_exchange = false;
};
const SliceTuning& slice_tuning();
// The same parse of any variable (tests read one of their own: slice_tuning() reads once).
SliceTuning slice_tuning_from_environment(std::string_view variable);

// The plan for the forward rows of `a` on `device`: cluster 0 unless the rows are 16-byte
// vectorizable (V, strides and pointers) and fit in at most row_kernel_above_cluster CTAs;
// clusters only where the device runs this library's sm_90 code. forward_rows launches the slice
// kernel exactly when cluster > 0 (and falls back to the row kernel only if not even one cluster of
// it fits on the device).
SlicePlan forward_slice_plan(const detail::CrossEntropyArgs& a, int device);

}  // namespace tigon::cuda::cross_entropy
