// The RoPE backward kernels (one translation unit per direction: parallel compilation).
#include "cuda/rope/launch.cuh"

namespace tigon::cuda::rotary {
void launch_bwd(const detail::RopeArgs& a, cudaStream_t stream) {
  launch_direction<true>(a, stream);
}
}  // namespace tigon::cuda::rotary
