// The CUDA cross-entropy slice planner and its tuning parser (src/cuda/cross_entropy/slice_plan.h,
// tuning.cpp): host logic, checked in every build without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/cross_entropy/slice_plan.h"
#include "test_support.h"

namespace {

// NOLINTNEXTLINE(google-build-using-namespace): the unit under test
using namespace tigon::cuda::cross_entropy;

// Packs are 16 bytes.
TEST(CrossEntropySlicePlan, ClusterSizesAndThresholds) {
  struct Want {
    std::int64_t packs;
    int max_cluster, cluster;
    std::int64_t slice_packs;
  };
  const Want wants[] = {
      {1, 8, 1, 1},        {4096, 8, 1, 4096},  // bf16 V = 32768: 64 KB, one CTA
      {4097, 8, 2, 2049},                       // just over
      {8192, 8, 2, 4096},                       // bf16 V = 65536
      {8193, 8, 4, 2049},                       //
      {16032, 8, 4, 4008},                      // bf16 V = 128256: 62.6 KB slices
      {32064, 8, 8, 4008},                      // fp32 V = 128256
      {32000, 8, 8, 4000},                      // bf16 V = 256000: 62.5 KB
      {51200, 8, 8, 6400},                      // fp32 V = 204800: 100 KB slices, two CTAs per SM
      {51201, 8, 0, 0},                         // past 100 KB: the row kernel
      {16032, 1, 0, 0},                         // no clusters: only rows that fit one CTA
      {6400, 1, 1, 6400},                       // 100 KB, one CTA
      {16032, 2, 0, 0},                         //
      {16032, 4, 4, 4008},                      //
  };
  for (const Want& w : wants) {
    const auto plan = slice_plan(w.packs, w.max_cluster);
    EXPECT_EQ(plan.cluster, w.cluster) << w.packs << " packs, max cluster " << w.max_cluster;
    EXPECT_EQ(plan.slice_packs, w.slice_packs) << w.packs << " packs";
    if (plan.cluster > 0) {
      EXPECT_GE(plan.slice_packs * plan.cluster, w.packs);
      EXPECT_LT((plan.cluster - 1) * plan.slice_packs, w.packs);  // the last CTA has packs too
    }
  }
}

// Two stages (rows per CTA): half the slice per stage, else one stage.
TEST(CrossEntropySlicePlan, TwoStages) {
  struct Want {
    std::int64_t packs;
    int cluster;
    std::int64_t slice_packs;
    int stages;
  };
  const Want wants[] = {
      {2048, 1, 2048, 2},   // bf16 V = 16384: 2 x 32 KB on one CTA
      {2049, 2, 1025, 2},   //
      {16032, 8, 2004, 2},  // bf16 V = 128256: 2 x 31.3 KB on eight CTAs
      {16385, 8, 2049, 1},  // past 8 x 32 KB: one stage
      {32000, 8, 4000, 1},  // bf16 V = 256000
      {51201, 0, 0, 1},     // the row kernel
  };
  for (const Want& w : wants) {
    const auto plan = slice_plan(w.packs, 8, kSliceBytes, 2);
    EXPECT_EQ(plan.cluster, w.cluster) << w.packs << " packs";
    EXPECT_EQ(plan.slice_packs, w.slice_packs) << w.packs << " packs";
    if (plan.cluster > 0) EXPECT_EQ(plan.stages, w.stages) << w.packs << " packs";
    EXPECT_LE(plan.smem_bytes(), kMaxSliceBytes);
  }
}

// TIGON_CROSS_ENTROPY_TUNING's parser (slice_tuning() reads the real variable once per process).
using CrossEntropyTuningFromEnvironment =
    tigon::testing::OptionsVariableTest<SliceTuning, slice_tuning_from_environment>;

TEST_F(CrossEntropyTuningFromEnvironment, UnsetGivesTheDefaults) {
  const SliceTuning t = unset();
  EXPECT_TRUE(t.slices);
  EXPECT_EQ(t.max_cluster, kMaxCluster);
  EXPECT_EQ(t.row_kernel_above_cluster, kRowKernelAboveCluster);
  EXPECT_EQ(t.slice_bytes, kSliceBytes);
  EXPECT_EQ(t.stages, 1);
  EXPECT_TRUE(t.l2_hints);
  EXPECT_TRUE(t.reverse_second_pass);
  EXPECT_TRUE(t.dependent_launches);
}

TEST_F(CrossEntropyTuningFromEnvironment, KeysApplyInOrder) {
  const SliceTuning t = parse(
      "slices=0,max_cluster=4,row_above=8,slice_kb=32,stages=2,l2_hints=0,reverse=0,dependent=0,"
      "cluster_exchange=1,max_cluster=2");
  EXPECT_FALSE(t.slices);
  EXPECT_EQ(t.max_cluster, 2);  // the later value wins
  EXPECT_EQ(t.row_kernel_above_cluster, 8);
  EXPECT_EQ(t.slice_bytes, std::size_t{32} * 1024);
  EXPECT_EQ(t.stages, 2);
  EXPECT_FALSE(t.l2_hints);
  EXPECT_FALSE(t.reverse_second_pass);
  EXPECT_FALSE(t.dependent_launches);
  EXPECT_TRUE(t.cluster_exchange);
}

TEST_F(CrossEntropyTuningFromEnvironment, BadInputNamesTheKeyAndWhatItTakes) {
  expect_rejected({
      {"max_cluster=3", "max_cluster", "1, 2, 4 or 8"},
      {"row_above=16", "row_above", "1, 2, 4 or 8"},
      {"slice_kb=0", "slice_kb", "1 to 100"},
      {"slice_kb=101", "slice_kb", "1 to 100"},
      {"stages=3", "stages", "1 or 2"},
      {"l2_hints=2", "l2_hints", "0 or 1"},
      {"cluster_exchange=2", "cluster_exchange", "0 or 1"},
      {"clusters=1", "clusters", "an unknown key"},
      {"stages", "stages", "key=value"},
  });
}

}  // namespace
