// The CUDA cross-entropy slice planner (src/cuda/cross_entropy/slice_plan.h): host logic,
// checked in every build without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/cross_entropy/slice_plan.h"

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

}  // namespace
