// The gated RMSNorm CUDA launch config (src/cuda/gated_rms_norm/layout.cuh), checked without a
// GPU: a pure function of the shape and pack width that holds every pack of a row in one CTA's
// registers or picks the two-pass kernels, never a cluster, and RMSNorm's dW groups.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>

#include "cuda/gated_rms_norm/layout.cuh"

namespace {

using namespace tigon::cuda::gated_rms_norm;  // NOLINT(google-build-using-namespace): under test
namespace rms = tigon::cuda::rms_norm;

TEST(GatedRmsNormCudaLayout, RowsFitOrStream) {
  for (const int x_size : {2, 4}) {
    for (const int pack : {16 / x_size, 1}) {
      for (const std::int64_t hidden : std::initializer_list<std::int64_t>{
               1, 8, 64, 128, 1000, 2048, 4096, 16384, 16392, 20000, 65536}) {
        if (hidden % pack != 0) continue;
        SCOPED_TRACE(::testing::Message()
                     << "H " << hidden << ", pack " << pack << ", x " << x_size << " bytes");
        const Config c = config(4096, hidden, pack, x_size);
        const std::int64_t packs = hidden / pack;
        EXPECT_EQ(c.split.packs, packs);
        const bool fits = packs <= std::int64_t{rms::kMaxRowThreads} * kPacksPerThread;
        EXPECT_EQ(c.kernel, fits ? Kernel::kRows : Kernel::kTwoPass);
        if (c.kernel == Kernel::kRows) {
          EXPECT_EQ(c.split.slices, 1) << "no clusters";
          EXPECT_GE(std::int64_t{c.split.threads_per_row} * kPacksPerThread, packs);
          EXPECT_LE(c.split.block_threads, rms::kMaxRowThreads);
          EXPECT_EQ(c.split.block_threads % c.split.threads_per_row, 0);
        } else {
          EXPECT_EQ(c.split.block_threads, rms::kTwoPassThreads);
        }
        const rms::DwGroups g = rms::dw_groups(4096, hidden, x_size);
        EXPECT_EQ(c.groups.groups, g.groups);
        EXPECT_EQ(c.groups.rows_per_group, g.rows_per_group);
        EXPECT_EQ(dw_partial_floats(4096, hidden, x_size), g.groups * hidden);
      }
    }
  }
}

TEST(GatedRmsNormCudaLayout, Qwen3NextHeadRowsShareABlock) {
  // head_v_dim 128 in bf16, 16-byte packs: 16 packs, 4 threads a row, 32 rows a block of 128.
  const Config c = config(4 * 4096 * 32, 128, 8, 2);
  EXPECT_EQ(c.kernel, Kernel::kRows);
  EXPECT_EQ(c.split.threads_per_row, 4);
  EXPECT_EQ(c.split.block_threads, 128);
}

}  // namespace
