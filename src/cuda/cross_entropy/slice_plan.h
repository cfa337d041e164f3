// Which rows the one-read slice kernel (slice_kernel.cuh) takes, and how it splits them: the
// smallest cluster whose slices fit the shared memory of three CTAs per SM, else the largest
// cluster if its slices fit two per SM. Other rows run the two-pass row kernel.
#pragma once

#include <cstddef>
#include <cstdint>

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
  std::size_t smem_bytes() const { return static_cast<std::size_t>(slice_packs) * kSlicePackBytes; }
};

// Rows of `packs` 16-byte packs, clusters of up to `max_cluster` CTAs (1 without clusters): the
// smallest cluster whose slices fit kSliceBytes (bf16 rows V <= 32768 one CTA, <= 65536 two,
// <= 131072 four (V = 128256: 62.6 KB slices), <= 262144 eight (256000: 62.5 KB); fp32 rows: half
// those), then the largest cluster up to kMaxSliceBytes slices.
inline SlicePlan slice_plan(std::int64_t packs, int max_cluster) {
  const auto slice = [&](int c) { return (packs + c - 1) / c; };
  for (int c = 1; c <= max_cluster; c *= 2) {
    if (static_cast<std::size_t>(slice(c)) * kSlicePackBytes <= kSliceBytes) return {c, slice(c)};
  }
  int largest = 1;
  while (largest * 2 <= max_cluster) largest *= 2;
  if (static_cast<std::size_t>(slice(largest)) * kSlicePackBytes <= kMaxSliceBytes)
    return {largest, slice(largest)};
  return {};
}

// The plan for the forward rows of `a` on `device`: cluster 0 unless the rows are 16-byte
// vectorizable (V, strides and pointers) and fit in at most kRowKernelAboveCluster CTAs;
// clusters only where the device runs this library's sm_90 code. forward_rows launches the slice
// kernel exactly when cluster > 0 (and falls back to the row kernel only if not even one cluster of
// it fits on the device).
SlicePlan forward_slice_plan(const detail::CrossEntropyArgs& a, int device);

}  // namespace tigon::cuda::cross_entropy
