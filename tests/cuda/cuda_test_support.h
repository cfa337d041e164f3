// Helpers shared by the CUDA backend tests: skipping without a device, checking CUDA calls, and
// an owning device buffer.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tigon::testing {

inline bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (!::tigon::testing::cuda_device_present()) GTEST_SKIP() << "no CUDA device"

inline void cuda_ok(cudaError_t status, const char* what = "CUDA call") {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + " " +
                             cudaGetErrorString(status));
  }
}

// An owning, zero-filled device allocation (at least one byte, so data() is never null).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    cuda_ok(cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
    fill(0);
  }
  // A device copy of `n` host bytes, in an allocation of `n + slack` bytes.
  DeviceBuffer(const void* host, std::size_t n, std::size_t slack = 0) : DeviceBuffer(n + slack) {
    upload(host, n);
  }
  ~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_) { o.data_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  float* floats() const { return static_cast<float*>(data_); }
  std::size_t bytes() const { return bytes_; }
  // upload and fill complete before they return: they run on the legacy default stream, which a
  // non-blocking stream (the graph tests') does not wait for, and a pageable cudaMemcpy may return
  // with its DMA still in flight; a fill left pending raced a captured forward.
  void upload(const void* host, std::size_t n) {
    if (n) cuda_ok(cudaMemcpy(data_, host, n, cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaDeviceSynchronize(), "upload completion");
  }
  void download(void* host, std::size_t n) const {
    if (n) cuda_ok(cudaMemcpy(host, data_, n, cudaMemcpyDeviceToHost), "download");
  }
  std::vector<unsigned char> download(std::size_t n) const {
    std::vector<unsigned char> out(n);
    download(out.data(), n);
    return out;
  }
  void fill(int byte) {
    cuda_ok(cudaMemset(data_, byte, std::max<std::size_t>(bytes_, 1)), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaMemset completion");
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tigon::testing
