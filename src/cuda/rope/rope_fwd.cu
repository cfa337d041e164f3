// The RoPE forward kernels (one translation unit per direction: parallel compilation).
#include "cuda/rope/launch.cuh"

namespace tigon::cuda::rotary {
void launch_fwd(const detail::RopeArgs& a, cudaStream_t stream) {
  launch_direction<false>(a, stream);
}
}  // namespace tigon::cuda::rotary
