// kl_div / jsd / tvd CUDA backend entry points: prepare (the denominator over the rows counted,
// the gradient's scale), the row kernel (inputs read once, gradient written in the same pass),
// and for a reduction the finish, all on the caller's stream, inside the caller's workspace.
// Never allocates and never synchronizes.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch.cuh"
#include "cuda/divergence/kernels.cuh"
#include "cuda/divergence/launch.h"
#include "ops/divergence_args.h"

namespace tigon::cuda {
namespace divergence {
namespace {

using detail::DivergenceArgs;
using math::DivergenceKind;

void prepare(const DivergenceArgs& a, cudaStream_t s) {
  launch_kernel(divergence_prepare_kernel, 1, dim3(kReduceThreads), 0, 1, s, a.labels, a.rows,
                a.ignore_index, detail::divergence_denominator(a, 0),
                detail::divergence_denominator(a, 1), a.workspace);
}

void rows(const DivergenceArgs& a, const Plan& plan, bool backward, int device, cudaStream_t s) {
  switch (a.kind) {
    case DivergenceKind::kKlDiv:
      return launch_rows<DivergenceKind::kKlDiv>(a, plan, backward, device, s);
    case DivergenceKind::kJsd:
      return launch_rows<DivergenceKind::kJsd>(a, plan, backward, device, s);
    case DivergenceKind::kTvd:
      return launch_rows<DivergenceKind::kTvd>(a, plan, backward, device, s);
  }
}

}  // namespace

void fwd_with_plan(const DivergenceArgs& a, const Plan& plan, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  prepare(a, s);
  rows(a, plan, false, device, s);
  if (a.reduction == Reduction::kNone) return;
  launch_kernel(divergence_finish_kernel, 1, dim3(kReduceThreads), 0, 1, s, a.workspace,
                a.workspace + kHeaderFloats, a.rows, segments_per_row(a.vocab),
                static_cast<float*>(a.loss));
}

void bwd_with_plan(const DivergenceArgs& a, const Plan& plan, int device, void* stream) {
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  prepare(a, s);
  rows(a, plan, true, device, s);
}

}  // namespace divergence

std::size_t divergence_workspace_size(const detail::DivergenceArgs& a, int) {
  return static_cast<std::size_t>(divergence::workspace_floats(a)) * sizeof(float);
}

void divergence_fwd(const detail::DivergenceArgs& a, int device, void* stream) {
  divergence::fwd_with_plan(a, divergence::divergence_plan(a), device, stream);
}

void divergence_bwd(const detail::DivergenceArgs& a, int device, void* stream) {
  divergence::bwd_with_plan(a, divergence::divergence_plan(a), device, stream);
}

}  // namespace tigon::cuda
