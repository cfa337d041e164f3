// The kl_div / jsd / tvd CUDA plan (src/cuda/divergence/plan.h): host logic, checked in every
// build without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/divergence/plan.h"
#include "ops/divergence_args.h"

namespace {

using tigon::DType;
using tigon::Reduction;
using tigon::cuda::divergence::Access;
using tigon::cuda::divergence::divergence_plan;
using tigon::cuda::divergence::kHeaderFloats;
using tigon::cuda::divergence::kSegment;
using tigon::cuda::divergence::segments_per_row;
using tigon::cuda::divergence::workspace_floats;
using tigon::detail::DivergenceArgs;

alignas(16) unsigned char g_memory[1024];

DivergenceArgs aligned_args(DType dtype, std::int64_t rows, std::int64_t vocab,
                            std::int64_t stride) {
  DivergenceArgs a;
  a.dtype = dtype;
  a.rows = rows;
  a.vocab = vocab;
  a.reduction = Reduction::kBatchMean;
  a.input = g_memory;
  a.target = g_memory + 256;
  a.grad = g_memory + 512;
  a.input_row_stride = a.target_row_stride = a.grad_row_stride = stride;
  return a;
}

TEST(DivergenceCudaPlan, SegmentsDependOnTheVocabularyAlone) {
  EXPECT_EQ(kSegment, 8192);
  EXPECT_EQ(segments_per_row(1), 1);
  EXPECT_EQ(segments_per_row(8192), 1);
  EXPECT_EQ(segments_per_row(8193), 2);
  EXPECT_EQ(segments_per_row(128256), 16);
  EXPECT_EQ(segments_per_row(256000), 32);
}

TEST(DivergenceCudaPlan, WorkspaceHoldsTheHeaderAndOneSumPerSegment) {
  DivergenceArgs a = aligned_args(DType::kBFloat16, 8192, 128256, 128256);
  EXPECT_EQ(workspace_floats(a), kHeaderFloats + 8192 * 16);
  a.reduction = Reduction::kNone;
  EXPECT_EQ(workspace_floats(a), kHeaderFloats) << "kNone: no sums";
  a.rows = 0;
  a.reduction = Reduction::kSum;
  EXPECT_EQ(workspace_floats(a), kHeaderFloats) << "no rows";
}

TEST(DivergenceCudaPlan, SixteenByteAccessNeedsEveryRowAligned) {
  EXPECT_EQ(divergence_plan(aligned_args(DType::kBFloat16, 4, 128256, 128256)).access,
            Access::kVector);
  EXPECT_EQ(divergence_plan(aligned_args(DType::kBFloat16, 4, 37, 40)).access, Access::kVector)
      << "a partial last group is fine";
  EXPECT_EQ(divergence_plan(aligned_args(DType::kFloat32, 4, 37, 40)).access, Access::kVector);
  EXPECT_EQ(divergence_plan(aligned_args(DType::kBFloat16, 4, 32001, 32001)).access,
            Access::kScalar)
      << "odd row stride";
  EXPECT_EQ(divergence_plan(aligned_args(DType::kBFloat16, 1, 32001, 32001)).access,
            Access::kVector)
      << "one row: only the base matters";
  EXPECT_EQ(divergence_plan(aligned_args(DType::kFloat32, 4, 36, 36)).access, Access::kVector);
  EXPECT_EQ(divergence_plan(aligned_args(DType::kFloat32, 4, 34, 34)).access, Access::kScalar);

  DivergenceArgs a = aligned_args(DType::kBFloat16, 4, 64, 64);
  a.grad = g_memory + 514;
  EXPECT_EQ(divergence_plan(a).access, Access::kScalar) << "misaligned gradient";
  a.grad = nullptr;
  EXPECT_EQ(divergence_plan(a).access, Access::kVector) << "no gradient";
  a.reduction = Reduction::kNone;
  a.loss = g_memory + 770;
  a.loss_dtype = DType::kFloat32;
  a.loss_row_stride = 64;
  EXPECT_EQ(divergence_plan(a).access, Access::kScalar) << "misaligned kNone loss";
  a.loss = g_memory + 768;
  a.loss_row_stride = 66;
  EXPECT_EQ(divergence_plan(a).access, Access::kScalar) << "kNone loss rows off 16 bytes";
  a.loss_row_stride = 68;
  EXPECT_EQ(divergence_plan(a).access, Access::kVector);
}

}  // namespace
