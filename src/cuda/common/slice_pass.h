// How the CTAs that split a row into slices run: as one thread-block cluster (sm_90), or, on a GPU
// without clusters (an A100), as the same CTAs launched twice. The first launch (kPublish) stores
// each CTA's partial result over its slice in global memory and does nothing else; the second
// (kGather) combines a row's partials in rank order, exactly as the cluster's exchange does, and
// finishes the row. So a row's bits never depend on whether the GPU has clusters, at the cost of
// one more read of the row there.
#pragma once

#include <cstdint>

namespace tigon::cuda {

enum class SlicePass : std::uint8_t { kCluster, kPublish, kGather };

}  // namespace tigon::cuda
