// RoPE CUDA backend entry point: makes the op's device current and launches one direction's
// kernel on the caller's stream. Never allocates and never synchronizes (CUDA-graph safe).
#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/rope/launch.cuh"
#include "ops/rope_args.h"

namespace tigon::cuda {

void rope(const detail::RopeArgs& a, int device, void* stream) {
  if (a.count == 0) return;
  const DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.backward) {
    rotary::launch_bwd(a, s);
  } else {
    rotary::launch_fwd(a, s);
  }
}

}  // namespace tigon::cuda
