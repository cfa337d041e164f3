#include "cuda/common/occupancy.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "cuda/common/cuda_check.h"

namespace tigon::cuda {
namespace {

struct Key {
  const void* kernel;
  int device;
  std::size_t smem;
  int cluster;
  unsigned threads;
  bool operator==(const Key& o) const {
    return kernel == o.kernel && device == o.device && smem == o.smem && cluster == o.cluster &&
           threads == o.threads;
  }
};

constexpr std::size_t kMaxEntries = 256;  // past this, queried every time (bounded memory)

struct Entry {
  Key key;
  std::int64_t clusters;
};

std::int64_t query(const Key& k, dim3 block) {
  if (k.cluster <= 1) {
    int per_sm = 0, sms = 0;
    TIGON_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, k.kernel, static_cast<int>(block.x * block.y * block.z), k.smem));
    TIGON_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, k.device));
    return std::int64_t{per_sm} * sms;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(k.cluster));
  config.blockDim = block;
  config.dynamicSmemBytes = k.smem;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(k.cluster);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  TIGON_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, k.kernel, &config));
  return clusters;
}

}  // namespace

std::int64_t resident_clusters(const void* kernel, dim3 block, std::size_t dynamic_smem,
                               int cluster, int device) {
  const Key key{kernel, device, dynamic_smem, cluster, block.x * block.y * block.z};
  static std::mutex mutex;
  static std::vector<Entry> cache;  // few entries in practice: one per (kernel, row size) used
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : cache)
      if (e.key == key) return e.clusters;
  }
  // Queried on the device current in the caller (the op's device guard).
  const std::int64_t clusters = query(key, block);
  const std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() < kMaxEntries) cache.push_back({key, clusters});
  return clusters;
}

}  // namespace tigon::cuda
