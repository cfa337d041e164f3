// Host side of a launch: device facts (device_properties.h, cached per device) and one launch
// helper for plain and cluster launches on a stream.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_properties.h"

namespace tigon::cuda {

// gridDim.x limit; kernels loop over their work, so a capped grid is still complete.
inline constexpr std::int64_t kMaxGridBlocks = 0x7fffffff;

// Programmatic dependent launch (launch_dependent_kernel) needs this library's sm_90 code running
// on the device (older code compiles wait_for_prior_grid away).
inline bool dependent_launch_available(int device) { return device_properties(device).clusters; }

// Sets a kernel's launch attributes on `device` once, before its first launch or occupancy query:
// the dynamic shared memory it may ask for (max_dynamic_smem) and, if asked, the largest shared
// memory carveout. `configured` (a static next to the call, one per kernel instantiation) keeps
// one bit per device.
template <typename Kernel>
void configure_once(Kernel kernel, std::atomic<std::uint64_t>& configured, int device,
                    std::size_t max_dynamic_smem, bool max_shared_carveout) {
  const std::uint64_t bit = std::uint64_t{1} << (device % 64);
  if ((configured.load(std::memory_order_relaxed) & bit) != 0) return;
  TIGON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(max_dynamic_smem)));
  if (max_shared_carveout) {
    TIGON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
  }
  configured.fetch_or(bit, std::memory_order_relaxed);
}

// The dynamic shared memory a CTA may opt in to on `device`, less `static_bytes` of static shared
// memory (H100/H200: 227 KB).
inline std::size_t max_dynamic_smem(int device, std::size_t static_bytes) {
  const std::size_t optin = device_properties(device).max_smem_per_block_optin;
  return optin > static_bytes ? optin - static_bytes : 0;
}

// Launches kernel<<<grid, block, dynamic_smem, stream>>>(args...) with a 1-D grid, as clusters of
// `cluster` CTAs along x when cluster > 1 (grid must then be a multiple of it), and as a
// programmatic dependent launch (sm_90) when `dependent`: the kernel may then start while the
// kernel before it on the stream is still running (once that one has called
// allow_dependent_launch() in every CTA, or exited), which hides the launch gap and lets work that
// needs nothing of the earlier kernel overlap its tail. Such a kernel must call
// wait_for_prior_grid() (grid_dependency.cuh) before it touches anything the earlier kernel
// writes. Pass dependent only where the caller knows which kernel comes before (its own), and only
// where that kernel itself waited on its predecessors or was launched plainly; and only where
// dependent_launch_available(device), since on code built for older GPUs the wait compiles away.
// Throws kCudaError on failure.
template <typename... KernelParams, typename... Args>
void launch_dependent_kernel(void (*kernel)(KernelParams...), std::int64_t grid, dim3 block,
                             std::size_t dynamic_smem, int cluster, bool dependent,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = static_cast<unsigned>(cluster);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (dependent) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = count > 0 ? attributes : nullptr;
  config.numAttrs = count;
  TIGON_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  TIGON_CUDA_CHECK(cudaGetLastError());
}

// launch_dependent_kernel as a plain launch: the kernel starts after the one before it ends.
template <typename... KernelParams, typename... Args>
void launch_kernel(void (*kernel)(KernelParams...), std::int64_t grid, dim3 block,
                   std::size_t dynamic_smem, int cluster, cudaStream_t stream, Args&&... args) {
  launch_dependent_kernel(kernel, grid, block, dynamic_smem, cluster, false, stream,
                          std::forward<Args>(args)...);
}

}  // namespace tigon::cuda
