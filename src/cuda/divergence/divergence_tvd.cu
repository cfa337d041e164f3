// The tvd row kernels (launch_rows_as in launch_rows.cuh).
#include "cuda/divergence/launch_rows.cuh"

namespace tigon::cuda::divergence {
template void launch_rows<math::DivergenceKind::kTvd>(const detail::DivergenceArgs&, const Plan&,
                                                      bool, int, cudaStream_t);
}  // namespace tigon::cuda::divergence
