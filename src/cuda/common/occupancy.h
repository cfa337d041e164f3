// How many CTAs or clusters of a kernel fit on a device at once, for persistent grids.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tigon::cuda {

// Clusters of `cluster` CTAs (plain CTAs when cluster == 1) of `kernel`, launched with `block`
// threads and `dynamic_smem` bytes, resident on `device` at once (0: not even one). The runtime's
// answer (which knows how clusters pack into GPCs) is cached per (kernel, device, shared memory,
// cluster), so the call costs a lookup after the first. The kernel's attributes (maximum dynamic
// shared memory, carveout) must be set before the first call.
std::int64_t resident_clusters(const void* kernel, dim3 block, std::size_t dynamic_smem,
                               int cluster, int device);

}  // namespace tigon::cuda
