// Host side of a launch: device facts read off the runtime (cheap attribute queries, never
// cudaGetDeviceProperties), and one launch helper for plain and cluster launches on a stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "cuda/common/cuda_check.h"

namespace tigon::cuda {

// gridDim.x limit; kernels loop over their work, so a capped grid is still complete.
inline constexpr std::int64_t kMaxGridBlocks = 0x7fffffff;

struct DeviceInfo {
  int sm_count = 0;
  int cc_major = 0;
};

inline DeviceInfo device_info(int device) {
  DeviceInfo info;
  TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, device));
  TIGON_CUDA_CHECK(
      cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, device));
  return info;
}

// True when `kernel` runs on the current device from code compiled for sm_90 or newer, so kernels
// of its translation unit may be launched as thread-block clusters (false when only older code,
// e.g. compute_80 PTX JIT-compiled for a newer GPU, is present).
inline bool kernel_runs_sm90_code(const void* kernel) {
  cudaFuncAttributes attributes{};
  TIGON_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
}

// Launches kernel<<<grid, block, dynamic_smem, stream>>>(args...) with a 1-D grid, as clusters of
// `cluster` CTAs along x when cluster > 1 (grid must then be a multiple of it). Throws kCudaError
// on failure.
template <typename... KernelParams, typename... Args>
void launch_kernel(void (*kernel)(KernelParams...), std::int64_t grid, dim3 block,
                   std::size_t dynamic_smem, int cluster, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = block;
  config.dynamicSmemBytes = dynamic_smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  if (cluster > 1) {
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  TIGON_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  TIGON_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tigon::cuda
