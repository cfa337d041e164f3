// The cross-entropy CUDA steps, for callers that run the rows in chunks (fused linear
// cross-entropy): the reduction's scales over all rows, the rows of one chunk, the final sum.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cross_entropy_args.h"

namespace tigon::cuda::cross_entropy {

// Floats of the header the steps share (scales, denominators).
inline constexpr std::int64_t kHeaderFloats = 8;

// header[kHeaderFloats]; weights_f32[vocab] (only with class weights).
void prepare(const detail::CrossEntropyArgs& all_rows, float* header, float* weights_f32,
             cudaStream_t stream);

// The rows of `chunk` (pointers and row count of the chunk): per-row terms, lse if chunk.lse, the
// gradient for upstream 1 (chunk.grad_loss if set) into chunk.grad if set (may equal
// chunk.logits), each row times its token scale (chunk.token_scale...), chunk.predicted if set,
// and the hits into terms.hit if chunk.accuracy is set. For kNone, chunk.loss, chunk.z_loss and
// chunk.accuracy (if set) receive the per-row values. terms.slices: the slice results on a GPU
// without clusters (cross_entropy_fwd's workspace layout), null on one with. behind_prepare:
// prepare() is the last launch before this one on the stream (the rows then start while it runs).
void forward_rows(const detail::CrossEntropyArgs& chunk, const float* header,
                  const float* weights_f32, detail::RowTerms terms, bool behind_prepare, int device,
                  cudaStream_t stream);

// cross_entropy_fwd as on a GPU with (`clusters`) or without thread-block clusters: tests force
// both on one GPU, which must give the same bits. Without, the workspace must hold what
// cross_entropy_workspace_size says for a GPU without clusters (kSliceFloatsPerRow a row more).
void fwd_with_clusters(const detail::CrossEntropyArgs& a, bool clusters, int device, void* stream);

// all_rows.loss[0] (and z_loss[0], accuracy[0] if set) from the per-row terms of all its rows
// (kSum / kMean). behind_rows: forward_rows() is the last launch before this one on the stream
// (finish is then launched before the rows end).
void finish(const detail::CrossEntropyArgs& all_rows, const float* header, detail::RowTerms terms,
            bool behind_rows, int device, cudaStream_t stream);

}  // namespace tigon::cuda::cross_entropy
