// What the launch-config functions know of a device, read from the runtime once per device and
// cached: some attribute queries cost hundreds of microseconds (cudaDevAttrMemoryClockRate took
// 348 us a call on an H200 with CUDA 13.0), far more than a launch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tigon::cuda {

struct DeviceProperties {
  int sm_count = 0;
  int cc_major = 0;
  // This library's sm_90 code runs on the device (not older PTX JIT-compiled for it): thread-block
  // clusters, distributed shared memory and programmatic dependent launches may be used.
  bool clusters = false;
  // Peak DRAM bandwidth: two transfers a memory clock over the bus (H100 SXM 3352, H200 4915); 0
  // where the runtime reports no memory clock.
  std::int64_t peak_memory_gbps = 0;
  // The dynamic plus static shared memory a CTA may opt in to (H100/H200: 227 KB).
  std::size_t max_smem_per_block_optin = 0;
};

// The properties of `device`, queried on the first call for that device (thread-safe) and cached
// for the life of the process; later calls are a lookup.
const DeviceProperties& device_properties(int device);

// How many times device_properties has queried the runtime since the process started: tests use
// it to check that launches make no attribute queries after the first.
std::int64_t device_property_queries();

}  // namespace tigon::cuda
