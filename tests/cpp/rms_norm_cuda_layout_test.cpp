// The CUDA RMSNorm launch plan's host logic (src/cuda/rms_norm/layout.cuh), checked without a GPU:
// every row lands in exactly one dW group within the tuning's bounds, and every pack of a row in
// exactly one thread's registers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/rms_norm/layout.cuh"
#include "test_support.h"

namespace {

using namespace tigon::cuda::rms_norm;  // NOLINT(google-build-using-namespace): the unit under test

const std::vector<std::int64_t> kRows = {1, 7, 8, 9, 1000, 4096, 5003, 16384, 65536, 1 << 20};
const std::vector<std::int64_t> kHidden = {1,    3,     127,   1000,  1024,   4096,
                                           8192, 16384, 32768, 65536, 262144, 1 << 20};

void expect_groups_valid(std::int64_t rows, std::int64_t hidden, int x_size, const Tuning& t) {
  SCOPED_TRACE(::testing::Message() << rows << " x " << hidden << ", " << x_size << "-byte x, "
                                    << t.dw_wave_sms << " wave SMs");
  const DwGroups g = dw_groups(rows, hidden, x_size, t);
  // Every row in exactly one group, no empty group.
  EXPECT_GE(g.groups * g.rows_per_group, rows);
  EXPECT_LT((g.groups - 1) * g.rows_per_group, rows);
  // Within the bounds, the wave fit only merging groups.
  const std::int64_t cap =
      std::min(t.max_dw_groups,
               std::max(t.min_dw_groups, t.max_dw_partial_bytes / (hidden * std::int64_t{4})));
  EXPECT_EQ(dw_group_cap(hidden, t), cap);
  EXPECT_LE(g.groups, cap);
  EXPECT_GE(g.rows_per_group, t.min_rows_per_dw_group);
  EXPECT_GE(g.rows_per_group * hidden, t.min_elements_per_dw_group);
  Tuning no_fit = t;
  no_fit.dw_wave_sms = 0;
  EXPECT_LE(g.groups, dw_groups(rows, hidden, x_size, no_fit).groups);
  // Groups are only merged as far as the bounds (and whole waves) ask: one row fewer per group
  // would break one.
  std::int64_t fitted_cap = cap;
  const std::int64_t wave =
      t.dw_wave_sms > 0
          ? dw_wave_units(split_row(ceil_div(hidden * x_size, 16), bwd_policy(hidden, true, t)),
                          t.dw_wave_sms)
          : 0;
  if (wave > 0 && cap >= wave) fitted_cap = cap / wave * wave;
  if (g.rows_per_group >
      std::max(t.min_rows_per_dw_group, ceil_div(t.min_elements_per_dw_group, hidden))) {
    EXPECT_GT(ceil_div(rows, g.rows_per_group - 1), fitted_cap);
  }
}

TEST(RmsNormCudaLayout, DwGroupsCoverEveryRowOnceWithinTheBounds) {
  Tuning few_bytes;
  few_bytes.max_dw_partial_bytes = 65536;
  few_bytes.min_dw_groups = 2;
  Tuning waves;
  waves.dw_wave_sms = 132;
  Tuning odd_waves = few_bytes;
  odd_waves.dw_wave_sms = 7;
  for (const Tuning& t : {Tuning{}, few_bytes, waves, odd_waves}) {
    for (std::int64_t rows : kRows) {
      for (std::int64_t hidden : kHidden) {
        for (int x_size : {2, 4}) expect_groups_valid(rows, hidden, x_size, t);
      }
    }
  }
}

TEST(RmsNormCudaLayout, DwPartialsOfLongRowsStayUnderTheByteCap) {
  Tuning t;
  t.dw_wave_sms = 0;  // the caps alone
  // H <= 4096: 512 groups, as before the cap.
  EXPECT_EQ(dw_groups(16384, 4096, 2, t).groups, 512);
  EXPECT_EQ(dw_groups(16384, 4096, 2, t).rows_per_group, 32);
  // Longer rows: 8 MiB of float32 partials at most...
  EXPECT_EQ(dw_groups(16384, 8192, 2, t).groups, 256);
  EXPECT_EQ(dw_groups(8192, 16384, 2, t).groups, 128);
  EXPECT_EQ(dw_groups(4096, 32768, 2, t).groups, 64);
  EXPECT_EQ(dw_groups(4096, 32768, 2, t).rows_per_group, 64);
  EXPECT_EQ(dw_groups(8192, 24576, 2, t).groups, 85);
  // ...unless that would leave fewer than 64 groups.
  EXPECT_EQ(dw_groups(65536, 262144, 2, t).groups, 64);
  EXPECT_EQ(dw_groups(0, 4096, 2, t).groups, 0);
}

TEST(RmsNormCudaLayout, DwWaveUnitsFollowTheSplit) {
  const Tuning t;
  const auto units = [&](std::int64_t hidden, int x_size) {
    return dw_wave_units(split_row(hidden * x_size / 16, bwd_policy(hidden, true, t)), 132);
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
  // Larger clusters, placed within GPCs: 10/11 of what the SMs would hold. 8-CTA clusters of 256
  // threads (65536) or 192 (49152), two CTAs an SM: 30, as an H100 runs; of 512 threads: 15.
  EXPECT_EQ(units(65536, 2), 30);
  EXPECT_EQ(units(49152, 2), 30);
  EXPECT_EQ(units(32768, 4), 30);
  EXPECT_EQ(units(131072, 2), 15);
  EXPECT_EQ(dw_wave_units(split_row(4096 / 8, bwd_policy(4096, true, t)), 0), 0);
}

TEST(RmsNormCudaLayout, DwGroupsFillWholeWavesByDefault) {
  const Tuning t;
  EXPECT_EQ(t.dw_wave_sms, 132);
  // 8192 x 24576 bf16: 85 groups (two waves of 66 2-CTA clusters, the second a third full)
  // become 66 of 125 rows: one wave.
  EXPECT_EQ(dw_groups(8192, 24576, 2, t).groups, 66);
  EXPECT_EQ(dw_groups(8192, 24576, 2, t).rows_per_group, 125);
  // 16384 x 5120 and 4608 bf16: 409 and 455 groups against 396 resident CTAs: one wave of 391
  // (42 rows a group; the rows do not divide evenly).
  EXPECT_EQ(dw_groups(16384, 5120, 2, t).groups, 391);
  EXPECT_EQ(dw_groups(16384, 4608, 2, t).groups, 391);
  // 16384 x 6144 bf16: 341 against 264.
  EXPECT_EQ(dw_groups(16384, 6144, 2, t).groups, 261);
  // 1024 x 65536 and 2048 x 49152 bf16 (8-CTA clusters): 64 groups, a third wave of 4 behind two
  // of 30 (backward 65% of the copy ceiling on an H100, against 75-76% in one wave of 30), become
  // two full waves.
  EXPECT_EQ(dw_groups(1024, 65536, 2, t).groups, 57);
  EXPECT_EQ(dw_groups(2048, 49152, 2, t).groups, 59);
  // Power-of-two bf16 rows one CTA or a 2-CTA cluster holds keep their groups: already within one
  // wave. (float32 rows of 4096 go from 512 groups, two waves of 264 CTAs, to 261 of 63 rows, one.)
  Tuning no_fit;
  no_fit.dw_wave_sms = 0;
  for (std::int64_t hidden : {1024, 2048, 4096, 8192, 16384, 32768}) {
    EXPECT_EQ(dw_groups(16384, hidden, 2, t).groups, dw_groups(16384, hidden, 2, no_fit).groups)
        << hidden;
  }
  EXPECT_EQ(dw_groups(16384, 4096, 4, t).groups, 261);
}

void expect_split_valid(std::int64_t packs, const SplitPolicy& policy) {
  SCOPED_TRACE(::testing::Message() << packs << " packs, " << policy.packs_per_thread
                                    << " a thread, at least " << policy.min_row_threads);
  const RowSplit s = split_row(packs, policy);
  EXPECT_EQ(s.packs, packs);
  if (s.two_pass) return;  // the two-pass kernels stream any length
  ASSERT_GE(s.slices, 1);
  ASSERT_LE(s.slices, kMaxClusterSize);
  // The slices cover the row, and each slice's threads hold its packs.
  EXPECT_GE(static_cast<std::int64_t>(s.slices) * s.slice_packs, packs);
  EXPECT_GE(static_cast<std::int64_t>(s.threads_per_row) * policy.packs_per_thread, s.slice_packs);
  EXPECT_GE(static_cast<std::int64_t>(s.threads_per_row) * s.slices,
            std::min<std::int64_t>(policy.min_row_threads, packs));
  // Rows share a warp only as an exact power of two; past 64 threads a row fills whole warps.
  const int g = s.threads_per_row;
  EXPECT_TRUE(g <= 64 ? (g & (g - 1)) == 0 : g % 32 == 0) << g;
  EXPECT_LE(s.block_threads, kMaxRowThreads);
  EXPECT_EQ(s.block_threads % g, 0);
  if (s.slices > 1) EXPECT_EQ(s.block_threads, g);  // a cluster reduces one row
}

TEST(RmsNormCudaLayout, RowSplitsHoldEveryPack) {
  const Tuning defaults;
  Tuning spread;
  spread.fwd_min_row_threads = 128;
  spread.bwd_min_row_threads = 256;
  spread.cluster_slice_threads = 256;
  spread.fwd_cluster_slice_threads = 64;
  for (const Tuning& t : {defaults, spread}) {
    for (bool clusters : {true, false}) {
      for (std::int64_t hidden : kHidden) {
        for (int p : {1, 4, 8}) {
          if (hidden % p != 0) continue;
          const int x_size = p == 8 ? 2 : 4;
          expect_split_valid(hidden / p, fwd_policy(hidden, x_size, clusters, t));
          for (int light_packs : {2, 4})
            expect_split_valid(hidden / p, fwd_policy(hidden, x_size, clusters, t, light_packs));
          expect_split_valid(hidden / p, bwd_policy(hidden, clusters, t));
        }
      }
    }
  }
}

TEST(RmsNormCudaLayout, LightForwardServesRowsUpToItsThreadLimit) {
  const Tuning defaults;
  EXPECT_EQ(light_fwd_split(1024 / 8, 1024, 2, true, 0, defaults).packs, 0);
  // bf16 rows (8 elements a pack): by default 4 packs a thread within 512 threads, so up to
  // H 16384; 32768 goes to the two-pass kernel, longer rows to clusters. With 2 packs a thread
  // the same limit stops at 8192.
  for (int packs_per_thread : {4, 2}) {
    Tuning t;
    t.fwd_light_packs_per_thread = packs_per_thread;
    const int limit = t.fwd_light_max_row_threads;
    const std::int64_t longest = std::int64_t{8} * packs_per_thread * limit;
    for (std::int64_t hidden : {std::int64_t{8}, std::int64_t{1024}, longest}) {
      const RowSplit s = light_fwd_split(hidden / 8, hidden, 2, true, limit, t);
      EXPECT_EQ(s.packs, hidden / 8) << hidden;
      EXPECT_EQ(s.slices, 1) << hidden;
      EXPECT_FALSE(s.two_pass) << hidden;
      EXPECT_LE(s.threads_per_row, limit) << hidden;
      EXPECT_GE(static_cast<std::int64_t>(s.threads_per_row) * packs_per_thread, s.packs);
    }
    for (bool clusters : {true, false}) {
      EXPECT_EQ(light_fwd_split(2 * longest / 8, 2 * longest, 2, clusters, limit, t).packs, 0);
      EXPECT_EQ(light_fwd_split(4 * longest / 8, 4 * longest, 2, clusters, limit, t).packs, 0);
    }
  }
  EXPECT_EQ(light_fwd_split(8192 / 8, 8192, 2, true, 256, defaults).packs, 8192 / 8);
  EXPECT_EQ(light_fwd_split(16384 / 8, 16384, 2, true, 256, defaults).packs, 0);
}

TEST(RmsNormCudaLayout, FastMemoryGpusCapTheLightForward) {
  // An H100 SXM (3352 GB/s) keeps the light kernel's 512 threads, so bf16 H 16384 takes it; an
  // H200 (4915 GB/s) caps it at 256, and H 16384 goes to the 8-pack kernel.
  const Tuning t;
  EXPECT_EQ(light_fwd_max_row_threads(3352, t), 512);
  EXPECT_EQ(light_fwd_max_row_threads(4915, t), 256);
  EXPECT_EQ(light_fwd_max_row_threads(0, t), 512);  // no memory clock reported
  // The cap never raises an explicit limit: fwd_light_max_row_threads=0 turns the kernel off on
  // every GPU.
  Tuning off;
  off.fwd_light_max_row_threads = 0;
  EXPECT_EQ(light_fwd_max_row_threads(4915, off), 0);
  Tuning wide;
  wide.fwd_light_max_row_threads_fast_memory = 512;
  EXPECT_EQ(light_fwd_max_row_threads(4915, wide), 512);
}

TEST(RmsNormCudaLayout, TwoPassForwardUnrollByRowLength) {
  // 2 packs a thread up to 48 KB rows (bf16 H 24576), 4 above; a set unroll applies to every row.
  const Tuning t;
  EXPECT_EQ(fwd_two_pass_unroll_for(24576, 2, t), 2);
  EXPECT_EQ(fwd_two_pass_unroll_for(24576 + 8, 2, t), 4);
  EXPECT_EQ(fwd_two_pass_unroll_for(32768, 2, t), 4);
  EXPECT_EQ(fwd_two_pass_unroll_for(12288, 4, t), 2);
  EXPECT_EQ(fwd_two_pass_unroll_for(65536, 2, t), 4);
  for (int fixed : {2, 4}) {
    Tuning f;
    f.fwd_two_pass_unroll = fixed;
    EXPECT_EQ(fwd_two_pass_unroll_for(24576, 2, f), fixed);
    EXPECT_EQ(fwd_two_pass_unroll_for(65536, 2, f), fixed);
  }
}

TEST(RmsNormCudaLayout, TwoPassForwardOnlyForRowsWhoseResidentCopiesFitL2) {
  const Tuning t;
  EXPECT_EQ(t.fwd_two_pass_max_row_bytes, 128 * 1024);
  EXPECT_EQ(t.fwd_two_pass_min_hidden, 24576);
  EXPECT_TRUE(t.fwd_two_pass_l2_hints);
  Tuning off;
  off.fwd_two_pass_max_row_bytes = 0;
  EXPECT_FALSE(split_row(32768 / 8, fwd_policy(32768, 2, true, off)).two_pass);
  // bf16: 24576 to 65536 elements are 48 to 128 KB; 131072 (256 KB) go to clusters, 16384 stay
  // in registers.
  for (std::int64_t hidden : {24576, 32768, 49152, 65536}) {
    EXPECT_TRUE(split_row(hidden / 8, fwd_policy(hidden, 2, true, t)).two_pass) << hidden;
  }
  EXPECT_FALSE(split_row(131072 / 8, fwd_policy(131072, 2, true, t)).two_pass);
  EXPECT_FALSE(split_row(16384 / 8, fwd_policy(16384, 2, true, t)).two_pass);
  // float32 rows of 32768 elements are 128 KB: two passes; of 65536, clusters.
  EXPECT_TRUE(split_row(32768 / 4, fwd_policy(32768, 4, true, t)).two_pass);
  EXPECT_FALSE(split_row(65536 / 4, fwd_policy(65536, 4, true, t)).two_pass);
  // Without clusters, rows past what one CTA holds in registers stream anyway.
  EXPECT_TRUE(split_row(131072 / 8, fwd_policy(131072, 2, false, off)).two_pass);
}

// The split of a bf16 row of `hidden` elements (16-byte packs of 8) on a GPU with clusters.
RowSplit bf16_fwd_split(std::int64_t hidden, const Tuning& t) {
  return split_row(hidden / 8, fwd_policy(hidden, 2, true, t));
}
RowSplit bf16_bwd_split(std::int64_t hidden, const Tuning& t) {
  return split_row(hidden / 8, bwd_policy(hidden, true, t));
}

TEST(RmsNormCudaLayout, ClusterSlicesCanBeSmallerThanTheClusterThreshold) {
  Tuning none;  // 512-thread slices for every row over a cluster, no two-pass forward
  none.fwd_two_pass_max_row_bytes = 0;
  none.fwd_cluster_slice_threads = 0;
  none.bwd_cluster_slice_threads = 0;
  Tuning fwd = none;
  fwd.fwd_cluster_slice_threads = 256;
  // bf16 65536 (1024 threads at 8 packs): 4 slices of 256 instead of 2 of 512; rows one CTA holds
  // (16384: 256 threads; 24576: 384) keep one CTA.
  EXPECT_EQ(bf16_fwd_split(65536, fwd).slices, 4);
  EXPECT_EQ(bf16_fwd_split(65536, none).slices, 2);
  EXPECT_EQ(bf16_fwd_split(16384, fwd).slices, 1);
  EXPECT_EQ(bf16_fwd_split(24576, fwd).slices, 1);
  // The backward keeps its own (bf16 65536 at 4 packs: 2048 threads, 4 slices of 512)...
  EXPECT_EQ(bf16_bwd_split(65536, fwd).slices, 4);
  // ... 256-thread slices with bwd_cluster_slice_threads, and only for the backward; with
  // bwd_cluster_slice_above=2 only for rows over more than 2 CTAs of 512 threads.
  Tuning bwd = none;
  bwd.bwd_cluster_slice_threads = 256;
  EXPECT_EQ(bf16_fwd_split(65536, bwd).slices, 2);
  const struct {
    std::int64_t hidden;
    int slices_above_1, slices_above_2;
  } rows[] = {{16384, 1, 1}, {24576, 4, 2}, {32768, 4, 2}, {49152, 8, 8}, {65536, 8, 8}};
  for (const auto& row : rows) {
    bwd.bwd_cluster_slice_above = 1;
    EXPECT_EQ(bf16_bwd_split(row.hidden, bwd).slices, row.slices_above_1) << row.hidden;
    bwd.bwd_cluster_slice_above = 2;
    EXPECT_EQ(bf16_bwd_split(row.hidden, bwd).slices, row.slices_above_2) << row.hidden;
  }
}

TEST(RmsNormCudaLayout, DefaultClusterSlices) {
  // 256-thread forward slices for every row over a cluster (bf16 past 65536 elements; shorter
  // rows from 24576 take two passes); the backward's for rows over more than 2 CTAs of 512
  // threads (bf16: 2 CTAs at 24576 and 32768, 8 at 49152 and 65536).
  const Tuning t;
  EXPECT_TRUE(bf16_fwd_split(65536, t).two_pass);
  EXPECT_EQ(bf16_fwd_split(131072, t).slices, 8);
  EXPECT_EQ(bf16_fwd_split(131072, t).threads_per_row, 256);
  EXPECT_EQ(bf16_bwd_split(24576, t).slices, 2);
  EXPECT_EQ(bf16_bwd_split(32768, t).slices, 2);
  EXPECT_EQ(bf16_bwd_split(49152, t).slices, 8);
  EXPECT_EQ(bf16_bwd_split(65536, t).slices, 8);
  EXPECT_EQ(bf16_bwd_split(65536, t).threads_per_row, 256);
  // Without clusters the slice sizes do not apply: a row longer than one CTA holds streams.
  EXPECT_TRUE(split_row(65536 / 8, bwd_policy(65536, false, t)).two_pass);
}

TEST(RmsNormCudaLayout, FinishColumnsNarrowForShortRows) {
  const Tuning defaults;
  EXPECT_EQ(finish_columns(1024, defaults), 8);
  EXPECT_EQ(finish_columns(2048, defaults), 8);
  EXPECT_EQ(finish_columns(2049, defaults), 32);
  Tuning fixed;
  fixed.finish_columns = 16;
  EXPECT_EQ(finish_columns(1024, fixed), 16);
  EXPECT_EQ(finish_columns(65536, fixed), 16);
  // The vector form from 32768 elements a row by default; 0 takes it for every row.
  EXPECT_FALSE(finish_vector(16384, defaults));
  EXPECT_TRUE(finish_vector(32768, defaults));
  fixed.finish_vector_min_hidden = 0;
  EXPECT_TRUE(finish_vector(1024, fixed));
}

// TIGON_RMS_NORM_TUNING's parser (tuning() reads the real variable once per process).
using RmsNormTuningFromEnvironment =
    tigon::testing::OptionsVariableTest<Tuning, tuning_from_environment>;

TEST_F(RmsNormTuningFromEnvironment, UnsetGivesTheDefaults) {
  const Tuning t = unset();
  const Tuning defaults;
  EXPECT_EQ(t.fwd_light_max_row_threads, defaults.fwd_light_max_row_threads);
  EXPECT_EQ(t.fwd_light_packs_per_thread, defaults.fwd_light_packs_per_thread);
  EXPECT_EQ(t.fwd_two_pass_max_row_bytes, defaults.fwd_two_pass_max_row_bytes);
  EXPECT_EQ(t.finish_columns, 0);
}

TEST_F(RmsNormTuningFromEnvironment, KeysApplyInOrder) {
  const Tuning t = parse(
      "fwd_light_packs_per_thread=2,finish_columns=16,fwd_two_pass_max_row_bytes=128,"
      "fwd_light_max_row_threads=0,finish_columns=8,clusters=0,bwd_prefetch=1,dw_wave_sms=0,"
      "fwd_prefetch=1,cluster_exchange=0,dw_wave_sms=7,bwd_cluster_slice_above=4,"
      "fwd_two_pass_l2_hints=0,finish_vector_min_hidden=4096,fwd_two_pass_unroll=2,"
      "fast_memory_gbps=3000,fwd_light_max_row_threads_fast_memory=128,"
      "fwd_two_pass_unroll2_max_row_bytes=1024,"
      "fwd_two_pass_threads=1024");
  EXPECT_EQ(t.fwd_light_packs_per_thread, 2);
  EXPECT_EQ(t.fwd_two_pass_max_row_bytes, 128);
  EXPECT_EQ(t.fwd_light_max_row_threads, 0);
  EXPECT_EQ(t.finish_columns, 8);  // the later value wins
  EXPECT_FALSE(t.clusters);
  EXPECT_EQ(t.bwd_prefetch, 1);
  EXPECT_EQ(t.fwd_prefetch, 1);
  EXPECT_FALSE(t.cluster_exchange);
  EXPECT_EQ(t.dw_wave_sms, 7);
  EXPECT_EQ(t.bwd_cluster_slice_above, 4);
  EXPECT_FALSE(t.fwd_two_pass_l2_hints);
  EXPECT_EQ(t.finish_vector_min_hidden, 4096);
  EXPECT_EQ(t.fwd_two_pass_unroll, 2);
  EXPECT_EQ(t.fast_memory_gbps, 3000);
  EXPECT_EQ(t.fwd_light_max_row_threads_fast_memory, 128);
  EXPECT_EQ(t.fwd_two_pass_unroll2_max_row_bytes, 1024);
  EXPECT_EQ(t.fwd_two_pass_threads, 1024);
}

TEST_F(RmsNormTuningFromEnvironment, BadInputNamesTheKeyAndWhatItTakes) {
  expect_rejected({
      {"fwd_light_packs_per_thread=3", "fwd_light_packs_per_thread", "2 or 4"},
      {"finish_columns=12", "finish_columns", "0, 8, 16 or 32"},
      {"fwd_stages=1", "fwd_stages", "0 or 2 to 8"},
      {"clusters=2", "clusters", "0 or 1"},
      {"bwd_prefetch=3", "bwd_prefetch", "0, 1 (all rows) or 2"},
      {"fwd_prefetch=3", "fwd_prefetch", "0, 1 (rows over clusters) or 2"},
      {"fwd_cluster_slice_threads=16", "fwd_cluster_slice_threads", "0 or 32 to 512"},
      {"bwd_cluster_slice_threads=1024", "bwd_cluster_slice_threads", "0 or 32 to 512"},
      {"bwd_cluster_slice_above=0", "bwd_cluster_slice_above", "1 to 8"},
      {"cluster_exchange=2", "cluster_exchange", "0 or 1"},
      {"fwd_two_pass_l2_hints=2", "fwd_two_pass_l2_hints", "0 or 1"},
      {"finish_vector=1", "finish_vector", "a key of struct Tuning"},
      {"finish_vector_min_hidden=-1", "finish_vector_min_hidden", "a non-negative integer"},
      {"fwd_two_pass_unroll=3", "fwd_two_pass_unroll", "0 (by row length), 2 or 4"},
      {"fwd_two_pass_threads=256", "fwd_two_pass_threads", "512 or 1024"},
      {"fwd_light_max_row_threads_fast_memory=513", "fwd_light_max_row_threads_fast_memory",
       "0 to 512"},
      {"dw_wave_sms=5000", "dw_wave_sms", "up to 4096"},
      {"fwd_two_pass_max_row_bytes=-1", "fwd_two_pass_max_row_bytes", "a non-negative integer"},
      {"finish_tree=1", "finish_tree", "a key of struct Tuning"},
      {"fwd_block_threads=0", "fwd_block_threads", "keeps every count positive"},
      {"fwd_light=1", "fwd_light", "a key of struct Tuning"},
      {"finish_columns", "finish_columns", "key=value"},
  });
}

}  // namespace
