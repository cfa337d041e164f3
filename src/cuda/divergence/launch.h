// The kl_div / jsd / tvd CUDA steps, and the entry points under a forced plan (tests force every
// plan, which must give the same bits as divergence_plan's).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/divergence/plan.h"
#include "ops/divergence_args.h"

namespace tigon::cuda::divergence {

// The row kernel of kind K for `a` under `plan`: the forward (kNone loss or segment sums, the
// gradient if a.grad) or the backward; `header` and `segment_sums` in a's workspace.
template <math::DivergenceKind K>
void launch_rows(const detail::DivergenceArgs& a, const Plan& plan, bool backward, int device,
                 cudaStream_t stream);

void fwd_with_plan(const detail::DivergenceArgs& a, const Plan& plan, int device, void* stream);
void bwd_with_plan(const detail::DivergenceArgs& a, const Plan& plan, int device, void* stream);

}  // namespace tigon::cuda::divergence
