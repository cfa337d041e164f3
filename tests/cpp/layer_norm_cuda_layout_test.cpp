// The CUDA LayerNorm launch configs' host logic (src/cuda/layer_norm/layout.h), checked without a
// GPU: which kernel each shape takes, every pack of a row in exactly one thread's registers, every
// row in exactly one dW group within the bounds, and a workspace that holds the partials.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/layer_norm/layout.h"

namespace {

using namespace tigon::cuda::layer_norm;  // NOLINT(google-build-using-namespace): the unit under
                                          // test

const std::vector<std::int64_t> kRows = {1, 7, 8, 9, 1000, 4096, 5003, 16384, 65536, 1 << 20};
const std::vector<std::int64_t> kHidden = {1,    3,    64,    127,   1000,  1024,  4096,
                                           4097, 8192, 16384, 32768, 65536, 65537, 262144};

// A register split holds every pack once: packs_per_thread packs for each of threads_per_row
// threads cover the row, one thread fewer would not, and the block holds whole rows.
void expect_split_covers(const RowSplit& s, int packs_per_thread) {
  ASSERT_FALSE(s.two_pass);
  EXPECT_EQ(s.slices, 1);
  EXPECT_GE(std::int64_t{s.threads_per_row} * packs_per_thread, s.packs);
  EXPECT_LE(s.threads_per_row, tigon::cuda::rms_norm::kMaxRowThreads);
  EXPECT_EQ(s.block_threads % s.threads_per_row, 0);
  EXPECT_LE(s.block_threads, tigon::cuda::rms_norm::kMaxRowThreads);
  // Warps are whole, or the row's threads are a power of two within one (row_group_sum).
  if (s.threads_per_row > 32) {
    EXPECT_EQ(s.threads_per_row % 32, 0);
  } else {
    EXPECT_EQ(s.threads_per_row & (s.threads_per_row - 1), 0);
  }
}

TEST(LayerNormCudaLayout, ForwardKernelPerShape) {
  // 16-byte packs: bf16 rows up to 32768 elements stay in registers (8 packs a thread, 512
  // threads), float32 up to 16384; longer rows stream.
  EXPECT_EQ(fwd_config(32768, 8).kernel, FwdKernel::kRows);
  EXPECT_EQ(fwd_config(32776, 8).kernel, FwdKernel::kStreaming);
  EXPECT_EQ(fwd_config(16384, 4).kernel, FwdKernel::kRows);
  EXPECT_EQ(fwd_config(32768, 4).kernel, FwdKernel::kStreaming);
  // The scalar path: 4096 elements a row at most.
  EXPECT_EQ(fwd_config(4096, 1).kernel, FwdKernel::kRows);
  EXPECT_EQ(fwd_config(4097, 1).kernel, FwdKernel::kStreaming);
  // Short rows share 128-thread blocks.
  EXPECT_EQ(fwd_config(1024, 8).split.threads_per_row, 16);
  EXPECT_EQ(fwd_config(1024, 8).split.block_threads, 128);
  EXPECT_EQ(fwd_config(4096, 8).split.threads_per_row, 64);
  for (std::int64_t hidden : kHidden) {
    for (int pack : {1, 4, 8}) {
      if (hidden % pack != 0) continue;
      SCOPED_TRACE(::testing::Message() << "H " << hidden << ", pack " << pack);
      const FwdConfig c = fwd_config(hidden, pack);
      EXPECT_EQ(c.split.packs, hidden / pack);
      if (c.kernel == FwdKernel::kRows) {
        expect_split_covers(c.split, kFwdPacksPerThread);
      } else {
        EXPECT_EQ(c.split.block_threads, kStreamThreads);
        EXPECT_GT(c.split.packs,
                  std::int64_t{tigon::cuda::rms_norm::kMaxRowThreads} * kFwdPacksPerThread);
      }
    }
  }
}

TEST(LayerNormCudaLayout, BackwardKernelPerShape) {
  // 16-byte bf16 packs: 1 pack a thread up to 1024 elements, 2 up to 4096, 4 up to 16384, then
  // the streaming kernel.
  EXPECT_EQ(bwd_config(16384, 1024, 8).packs_per_thread, 1);
  EXPECT_EQ(bwd_config(16384, 1024, 8).split.block_threads, 256);  // two rows a block
  EXPECT_EQ(bwd_config(16384, 2048, 8).split.block_threads, 128);  // 2 packs: one row a block
  EXPECT_EQ(bwd_config(16384, 4096, 8).packs_per_thread, 2);
  EXPECT_EQ(bwd_config(16384, 4096, 8).split.threads_per_row, 256);
  EXPECT_EQ(bwd_config(16384, 16384, 8).packs_per_thread, 4);
  EXPECT_EQ(bwd_config(16384, 16384, 8).kernel, BwdKernel::kRows);
  EXPECT_EQ(bwd_config(16384, 32768, 8).kernel, BwdKernel::kStreaming);
  EXPECT_EQ(bwd_config(16384, 16384, 4).kernel, BwdKernel::kStreaming);
  for (std::int64_t hidden : kHidden) {
    for (int pack : {1, 4, 8}) {
      if (hidden % pack != 0) continue;
      SCOPED_TRACE(::testing::Message() << "H " << hidden << ", pack " << pack);
      const BwdConfig c = bwd_config(1000, hidden, pack);
      EXPECT_EQ(c.split.packs, hidden / pack);
      if (c.kernel == BwdKernel::kRows) {
        expect_split_covers(c.split, c.packs_per_thread);
        // The fewest packs a thread that fit: one fewer would need more threads than allowed.
        if (c.packs_per_thread > 1) {
          EXPECT_GT(c.split.packs, (c.packs_per_thread == 2 ? kBwdMaxPacksK1 : kBwdMaxPacksK2));
        }
        // Row slots share a block only at one pack a thread (the kernel's shared-memory merge),
        // and never past its buffer.
        if (rows_per_block(c.split) > 1) {
          EXPECT_EQ(c.packs_per_thread, 1);
          EXPECT_LE(c.split.block_threads, kBwdBlockThreads);
        }
      } else {
        EXPECT_GT(c.split.packs, kBwdMaxPacksK4);
        EXPECT_EQ(c.split.block_threads, kStreamThreads);
      }
      const BwdConfig s = streaming_bwd_config(1000, hidden, pack);
      EXPECT_EQ(s.kernel, BwdKernel::kStreaming);
      EXPECT_EQ(s.groups.groups, c.groups.groups);  // forcing streaming keeps dW's grouping
    }
  }
}

TEST(LayerNormCudaLayout, DwGroupsCoverEveryRowOnceWithinTheBounds) {
  for (std::int64_t rows : kRows) {
    for (std::int64_t hidden : kHidden) {
      SCOPED_TRACE(::testing::Message() << rows << " x " << hidden);
      const DwGroups g = dw_groups(rows, hidden);
      EXPECT_GE(g.groups * g.rows_per_group, rows);
      EXPECT_LT((g.groups - 1) * g.rows_per_group, rows);
      EXPECT_LE(g.groups, kMaxDwGroups);
      EXPECT_GE(g.rows_per_group, kMinRowsPerGroup);
      const std::int64_t by_bytes =
          std::max(kMinDwGroups, kMaxPartialBytes / (hidden * std::int64_t{4}));
      EXPECT_LE(g.groups, by_bytes);
      EXPECT_EQ(partial_floats(rows, hidden, true, true), 2 * g.groups * hidden);
      EXPECT_EQ(partial_floats(rows, hidden, true, false), g.groups * hidden);
      EXPECT_EQ(partial_floats(rows, hidden, false, false), 0);
    }
  }
  EXPECT_EQ(dw_groups(0, 4096).groups, 0);
  // 16384 x 4096: 512 groups of 32 rows; 16384 x 32768: 16 MiB of partials a gradient, 128 groups.
  EXPECT_EQ(dw_groups(16384, 4096).groups, 512);
  EXPECT_EQ(dw_groups(16384, 4096).rows_per_group, 32);
  EXPECT_EQ(dw_groups(16384, 32768).groups, 128);
}

}  // namespace
