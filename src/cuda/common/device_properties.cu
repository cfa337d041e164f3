// device_properties: one runtime query per device. Compiled by nvcc with the library's
// architectures, so its probe kernel's code version tells which code the device runs.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/check.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_properties.h"

namespace tigon::cuda {
namespace {

__global__ void code_version_probe_kernel() {}

constexpr int kMaxDevices = 64;
std::atomic<std::int64_t> queries{0};

int attribute(cudaDeviceAttr which, int device) {
  int value = 0;
  TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&value, which, device));
  return value;
}

// True when the probe kernel runs from code built for sm_90 or newer on the current device.
bool runs_sm90_code() {
  cudaFuncAttributes attributes{};
  TIGON_CUDA_CHECK(cudaFuncGetAttributes(
      &attributes, reinterpret_cast<const void*>(&code_version_probe_kernel)));
  return attributes.ptxVersion >= 90 && attributes.binaryVersion >= 90;
}

// Called with `device` current (the ops' DeviceGuard).
DeviceProperties query(int device) {
  queries.fetch_add(1, std::memory_order_relaxed);
  DeviceProperties p;
  p.sm_count = attribute(cudaDevAttrMultiProcessorCount, device);
  p.cc_major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  p.clusters = p.cc_major >= 9 && runs_sm90_code();
  const std::int64_t clock_khz = attribute(cudaDevAttrMemoryClockRate, device);
  const std::int64_t bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  p.peak_memory_gbps = clock_khz * bus_bits / 4'000'000;
  p.max_smem_per_block_optin =
      static_cast<std::size_t>(attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return p;
}

}  // namespace

const DeviceProperties& device_properties(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<DeviceProperties, kMaxDevices> cached;
  TIGON_CHECK_ARG(device >= 0 && device < kMaxDevices, "device_properties", "device",
                  "a CUDA device index from 0 to 63", std::to_string(device));
  std::call_once(once[device], [device] { cached[device] = query(device); });
  return cached[device];
}

std::int64_t device_property_queries() { return queries.load(std::memory_order_relaxed); }

}  // namespace tigon::cuda
