// clusters_available: a probe kernel compiled with the library's architectures (every translation
// unit has the same ones), whose code version tells which code the device runs.
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/clusters.h"
#include "cuda/common/launch.cuh"

namespace tigon::cuda {
namespace {

__global__ void cluster_probe_kernel() {}

constexpr int kMaxDevices = 64;

}  // namespace

bool clusters_available(int device) {
  const DeviceInfo info = device_info(device);
  if (info.cc_major < 9) return false;
  const void* probe = reinterpret_cast<const void*>(&cluster_probe_kernel);
  if (device < 0 || device >= kMaxDevices) return kernel_runs_sm90_code(probe);
  static std::atomic<int> cached[kMaxDevices] = {};  // 0 unknown, 1 no, 2 yes
  int state = cached[device].load(std::memory_order_relaxed);
  if (state == 0) {
    state = kernel_runs_sm90_code(probe) ? 2 : 1;
    cached[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

}  // namespace tigon::cuda
