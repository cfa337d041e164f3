// Device side of a programmatic dependent launch (sm_90; host side: launch_dependent_kernel in
// launch.cuh). Both are no-ops in code built for older GPUs, and in a kernel launched plainly.
#pragma once

namespace tigon::cuda {

// Blocks until the kernel before this one on the stream has finished and its writes are visible.
// Call it before the first access to anything that kernel writes.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel on the stream, if launched as a dependent, start before this one ends
// (it still waits for this kernel's completion at its wait_for_prior_grid()).
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace tigon::cuda
