// The CUDA RMSNorm launch configs' host logic (src/cuda/rms_norm/layout.cuh), checked without a
// GPU: every row lands in exactly one dW group within the bounds, every pack of a row in exactly
// one thread's registers, and every choice a device can change keeps the sums' order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/rms_norm/layout.cuh"

namespace {

using namespace tigon::cuda::rms_norm;  // NOLINT(google-build-using-namespace): the unit under test

const std::vector<std::int64_t> kRows = {1, 7, 8, 9, 1000, 4096, 5003, 16384, 65536, 1 << 20};
const std::vector<std::int64_t> kHidden = {1,    3,     127,   1000,  1024,   4096,
                                           8192, 16384, 32768, 65536, 262144, 1 << 20};

void expect_groups_valid(std::int64_t rows, std::int64_t hidden, int x_size) {
  SCOPED_TRACE(::testing::Message() << rows << " x " << hidden << ", " << x_size << "-byte x");
  const DwGroups g = dw_groups(rows, hidden, x_size);
  // Every row in exactly one group, no empty group.
  EXPECT_GE(g.groups * g.rows_per_group, rows);
  EXPECT_LT((g.groups - 1) * g.rows_per_group, rows);
  // Within the bounds.
  const std::int64_t cap = std::min(
      kMaxDwGroups, std::max(kMinDwGroups, kMaxDwPartialBytes / (hidden * std::int64_t{4})));
  EXPECT_LE(g.groups, cap);
  EXPECT_GE(g.rows_per_group, kMinRowsPerDwGroup);
  EXPECT_GE(g.rows_per_group * hidden, kMinElementsPerDwGroup);
  // Groups are only merged as far as the bounds (and whole waves) ask: one row fewer per group
  // would break one.
  std::int64_t fitted_cap = cap;
  const std::int64_t wave = dw_wave_units(bwd_split(ceil_div(hidden * x_size, 16)), kDwWaveSms);
  if (wave > 0 && cap >= wave) fitted_cap = cap / wave * wave;
  if (g.rows_per_group > std::max(kMinRowsPerDwGroup, ceil_div(kMinElementsPerDwGroup, hidden))) {
    EXPECT_GT(ceil_div(rows, g.rows_per_group - 1), fitted_cap);
  }
}

TEST(RmsNormCudaLayout, DwGroupsCoverEveryRowOnceWithinTheBounds) {
  for (std::int64_t rows : kRows) {
    for (std::int64_t hidden : kHidden) {
      for (int x_size : {2, 4}) expect_groups_valid(rows, hidden, x_size);
    }
  }
}

TEST(RmsNormCudaLayout, DwGroupsFillWholeWaves) {
  // H <= 4096: 512 groups of 32 rows.
  EXPECT_EQ(dw_groups(16384, 4096, 2).groups, 512);
  EXPECT_EQ(dw_groups(16384, 4096, 2).rows_per_group, 32);
  // Longer rows: 8 MiB of float32 partials at most, unless that leaves fewer than 64 groups.
  EXPECT_EQ(dw_groups(16384, 8192, 2).groups, 256);
  EXPECT_EQ(dw_groups(8192, 16384, 2).groups, 128);
  EXPECT_EQ(dw_groups(4096, 32768, 2).groups, 64);
  EXPECT_EQ(dw_groups(0, 4096, 2).groups, 0);
  // 8192 x 24576 bf16: 85 groups (two waves of 66 2-CTA clusters, the second a third full)
  // become 66 of 125 rows: one wave.
  EXPECT_EQ(dw_groups(8192, 24576, 2).groups, 66);
  EXPECT_EQ(dw_groups(8192, 24576, 2).rows_per_group, 125);
  // 16384 x 5120 and 4608 bf16: 409 and 455 groups against 396 resident CTAs: one wave of 391.
  EXPECT_EQ(dw_groups(16384, 5120, 2).groups, 391);
  EXPECT_EQ(dw_groups(16384, 4608, 2).groups, 391);
  EXPECT_EQ(dw_groups(16384, 6144, 2).groups, 261);
  // 8-CTA clusters: 64 groups (a third wave of 4 behind two of 30) become two full waves.
  EXPECT_EQ(dw_groups(1024, 65536, 2).groups, 57);
  EXPECT_EQ(dw_groups(2048, 49152, 2).groups, 59);
  EXPECT_EQ(dw_groups(16384, 4096, 4).groups, 261);
}

TEST(RmsNormCudaLayout, DwWaveUnitsFollowTheSplit) {
  const auto units = [](std::int64_t hidden, int x_size) {
    return dw_wave_units(bwd_split(hidden * x_size / 16), 132);
  };
  // bf16: 128-thread blocks, 4 an SM (H 4096); 160 threads, 3 (4608); 192, 2 (6144); one CTA of
  // 384 (12288) or 512 threads (16384) an SM; 2-CTA clusters of 384 threads (24576).
  EXPECT_EQ(units(4096, 2), 528);
  EXPECT_EQ(units(4608, 2), 396);
  EXPECT_EQ(units(6144, 2), 264);
  EXPECT_EQ(units(12288, 2), 132);
  EXPECT_EQ(units(16384, 2), 132);
  EXPECT_EQ(units(24576, 2), 66);
  EXPECT_EQ(units(12288, 4), 66);  // float32: twice the packs
  // Larger clusters, placed within GPCs: 10/11 of what the SMs would hold.
  EXPECT_EQ(units(65536, 2), 30);
  EXPECT_EQ(units(49152, 2), 30);
  EXPECT_EQ(units(32768, 4), 30);
  EXPECT_EQ(units(131072, 2), 15);
  EXPECT_EQ(dw_wave_units(bwd_split(4096 / 8), 0), 0);
}

void expect_split_valid(const RowSplit& s, std::int64_t packs, int packs_per_thread) {
  SCOPED_TRACE(::testing::Message() << packs << " packs, " << packs_per_thread << " a thread");
  EXPECT_EQ(s.packs, packs);
  if (s.two_pass) return;  // the two-pass kernels stream any length
  ASSERT_GE(s.slices, 1);
  ASSERT_LE(s.slices, kMaxClusterSize);
  // The slices cover the row, and each slice's threads hold its packs.
  EXPECT_GE(static_cast<std::int64_t>(s.slices) * s.slice_packs, packs);
  EXPECT_GE(static_cast<std::int64_t>(s.threads_per_row) * packs_per_thread, s.slice_packs);
  // Rows share a warp only as an exact power of two; past 64 threads a row fills whole warps.
  const int g = s.threads_per_row;
  EXPECT_TRUE(g <= 64 ? (g & (g - 1)) == 0 : g % 32 == 0) << g;
  EXPECT_LE(s.block_threads, kMaxRowThreads);
  EXPECT_EQ(s.block_threads % g, 0);
  if (s.slices > 1) EXPECT_EQ(s.block_threads, g);  // a cluster reduces one row
}

// Every device a config function can see.
const DeviceTraits kDevices[] = {{false, false}, {false, true}, {true, false}, {true, true}};

TEST(RmsNormCudaLayout, ConfigsHoldEveryPack) {
  for (const DeviceTraits d : kDevices) {
    for (std::int64_t hidden : kHidden) {
      for (int p : {1, 4, 8}) {
        if (hidden % p != 0) continue;
        const int x_size = p == 8 ? 2 : 4;
        const FwdConfig f = fwd_config(hidden, p, x_size, d);
        expect_split_valid(
            f.split, hidden / p,
            f.kernel == FwdKernel::kLightRows ? kLightPacksPerThread : kFwdPacksPerThread);
        EXPECT_EQ(f.kernel == FwdKernel::kTwoPass, f.split.two_pass);
        expect_split_valid(bwd_config(4096, hidden, p, x_size, d).split, hidden / p,
                           kBwdPacksPerThread);
      }
    }
  }
}

TEST(RmsNormCudaLayout, LightForwardServes16BitRowsOneCtaHolds) {
  const DeviceTraits h100{true, false};
  // bf16 (8 elements a pack): 4 packs a thread within 512 threads, so up to H 16384; 24576 and
  // longer take the two-pass kernel or clusters; float32 and the scalar path never the light one.
  for (std::int64_t hidden : {8, 1024, 4096, 16384}) {
    const FwdConfig c = fwd_config(hidden, 8, 2, h100);
    EXPECT_EQ(c.kernel, FwdKernel::kLightRows) << hidden;
    EXPECT_LE(c.split.threads_per_row, kLightMaxRowThreads);
  }
  EXPECT_EQ(fwd_config(24576, 8, 2, h100).kernel, FwdKernel::kTwoPass);
  EXPECT_EQ(fwd_config(131072, 8, 2, h100).kernel, FwdKernel::kRows);
  EXPECT_EQ(fwd_config(4096, 4, 4, h100).kernel, FwdKernel::kRows);
  EXPECT_EQ(fwd_config(4096, 1, 2, h100).kernel, FwdKernel::kRows);
}

TEST(RmsNormCudaLayout, DeviceChoicesKeepTheSumsOrder) {
  // On fast memory (an H200) rows needing more than 256 light threads take the 8-pack kernel
  // where the two pair (same sums, same order); elsewhere the choice is the same on every GPU.
  const DeviceTraits h100{true, false}, h200{true, true};
  const FwdConfig slow = fwd_config(16384, 8, 2, h100), fast = fwd_config(16384, 8, 2, h200);
  EXPECT_EQ(slow.kernel, FwdKernel::kLightRows);
  EXPECT_TRUE(slow.fold_half);
  EXPECT_EQ(slow.split.threads_per_row, 512);
  EXPECT_EQ(fast.kernel, FwdKernel::kRows);
  EXPECT_EQ(fast.split.threads_per_row, 256);
  for (std::int64_t hidden = 8; hidden <= 32768; hidden += 8) {
    for (int p : {1, 8}) {
      const FwdConfig a = fwd_config(hidden, p, 2, h100), b = fwd_config(hidden, p, 2, h200);
      if (a.kernel == b.kernel) {
        EXPECT_EQ(a.split.threads_per_row, b.split.threads_per_row) << hidden;
        EXPECT_EQ(a.fold_half, b.fold_half) << hidden;
        continue;
      }
      // The light kernel then folds its upper half first, and the 8-pack kernel has half the
      // threads: light_pairs_with_rows.
      ASSERT_EQ(a.kernel, FwdKernel::kLightRows) << hidden;
      ASSERT_EQ(b.kernel, FwdKernel::kRows) << hidden;
      EXPECT_TRUE(a.fold_half) << hidden;
      EXPECT_TRUE(light_pairs_with_rows(a.split, b.split)) << hidden;
    }
  }
  // A row that does not pair (bf16 8800: 275 light threads -> 288, 138 -> 160) stays light.
  EXPECT_EQ(fwd_config(8800, 8, 2, h200).kernel, FwdKernel::kLightRows);
  EXPECT_FALSE(fwd_config(8800, 8, 2, h200).fold_half);
}

TEST(RmsNormCudaLayout, TwoPassForwardForRowsWhoseResidentCopiesFitL2) {
  const DeviceTraits d{true, false};
  // bf16: 24576 to 65536 elements are 48 to 128 KB; 2 packs in flight a thread up to 48 KB.
  EXPECT_EQ(fwd_config(24576, 8, 2, d).two_pass_unroll, 2);
  EXPECT_EQ(fwd_config(24576 + 8, 8, 2, d).two_pass_unroll, 4);
  for (std::int64_t hidden : {24576, 32768, 49152, 65536}) {
    EXPECT_TRUE(fwd_config(hidden, 8, 2, d).split.two_pass) << hidden;
  }
  EXPECT_FALSE(fwd_config(131072, 8, 2, d).split.two_pass);
  EXPECT_FALSE(fwd_config(16384, 8, 2, d).split.two_pass);
  // float32 rows of 32768 elements are 128 KB: two passes; of 65536, clusters.
  EXPECT_TRUE(fwd_config(32768, 4, 4, d).split.two_pass);
  EXPECT_FALSE(fwd_config(65536, 4, 4, d).split.two_pass);
}

// The split is a function of the shape alone: a device without clusters runs the same slices,
// through the slice sums (SlicePass), and only where there are several.
TEST(RmsNormCudaLayout, TheDeviceNeverChangesTheSplit) {
  for (std::int64_t hidden : kHidden) {
    for (int p : {1, 4, 8}) {
      if (hidden % p != 0) continue;
      const int x_size = p == 8 ? 2 : 4;
      const FwdConfig with = fwd_config(hidden, p, x_size, {true, false});
      const FwdConfig without = fwd_config(hidden, p, x_size, {false, false});
      EXPECT_EQ(with.kernel, without.kernel) << hidden;
      EXPECT_EQ(with.split.slices, without.split.slices) << hidden;
      EXPECT_EQ(with.split.threads_per_row, without.split.threads_per_row) << hidden;
      EXPECT_FALSE(with.slice_sums);
      EXPECT_EQ(without.slice_sums, without.split.slices > 1) << hidden;
      const BwdConfig bwith = bwd_config(4096, hidden, p, x_size, {true, false});
      const BwdConfig bwithout = bwd_config(4096, hidden, p, x_size, {false, false});
      EXPECT_EQ(bwith.split.slices, bwithout.split.slices) << hidden;
      EXPECT_EQ(bwith.split.two_pass, bwithout.split.two_pass) << hidden;
      EXPECT_FALSE(bwith.slice_sums);
      EXPECT_EQ(bwithout.slice_sums, bwithout.split.slices > 1) << hidden;
    }
  }
  EXPECT_TRUE(fwd_config(131072, 8, 2, {false, false}).slice_sums);
  EXPECT_TRUE(bwd_config(4096, 65536, 8, 2, {false, false}).slice_sums);
}

TEST(RmsNormCudaLayout, ClusterSlices) {
  // 256-thread forward slices for every row over a cluster (bf16 past 65536 elements); the
  // backward's for rows over more than 2 CTAs of 512 threads (bf16: 2 CTAs at 24576 and 32768, 8
  // at 49152 and 65536).
  const DeviceTraits d{true, false};
  EXPECT_EQ(fwd_config(131072, 8, 2, d).split.slices, 8);
  EXPECT_EQ(fwd_config(131072, 8, 2, d).split.threads_per_row, 256);
  const struct {
    std::int64_t hidden;
    int slices;
  } rows[] = {{16384, 1}, {24576, 2}, {32768, 2}, {49152, 8}, {65536, 8}};
  for (const auto& row : rows) {
    const BwdConfig c = bwd_config(4096, row.hidden, 8, 2, d);
    EXPECT_EQ(c.split.slices, row.slices) << row.hidden;
    EXPECT_EQ(c.prefetch, row.slices > 1) << row.hidden;
  }
  EXPECT_EQ(bwd_config(4096, 65536, 8, 2, d).split.threads_per_row, 256);
}

TEST(RmsNormCudaLayout, FinishConfigByRowLength) {
  EXPECT_EQ(finish_config(1024).columns, 8);
  EXPECT_EQ(finish_config(2048).columns, 8);
  EXPECT_EQ(finish_config(2049).columns, 32);
  EXPECT_FALSE(finish_config(16384).vector);
  EXPECT_TRUE(finish_config(32768).vector);
}

}  // namespace
