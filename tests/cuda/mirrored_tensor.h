// A host tensor (tests/cpp/host_tensor.h) with a device copy of its whole buffer: the CUDA
// backend runs on the copy, the CPU backend on the host tensor, and the tests compare element
// by element through the host tensor after download().
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpp/host_tensor.h"
#include "cpp/test_support.h"
#include "cuda/cuda_test_support.h"
#include "tigon/tensor.h"

namespace tigon::testing {

class MirroredTensor {
 public:
  MirroredTensor(DType dtype, std::vector<std::int64_t> sizes, std::int64_t row_stride = -1)
      : host(dtype, sizes, row_stride),
        row_stride_(row_stride < 0 ? sizes.back() : row_stride),
        device_(host_bytes()) {
    upload();
  }

  // The device copy's view (as HostTensor::view).
  TensorView device_view() {
    TensorView v = host.view();
    v.data = device_.data();
    v.device = Device::cuda(0);
    return v;
  }
  void upload() { device_.upload(host.bytes(), host_bytes()); }
  void download() { device_.download(host.bytes(), host_bytes()); }
  // The device copy's bytes, without touching the host tensor.
  std::vector<unsigned char> device_bytes() const { return device_.download(host_bytes()); }

  HostTensor host;

 private:
  std::size_t host_bytes() const {
    const std::int64_t rows = host.rows(), hidden = host.hidden();
    return static_cast<std::size_t>((rows > 0 ? (rows - 1) * row_stride_ : 0) + hidden) *
               element_size(host.dtype()) +
           16;
  }
  std::int64_t row_stride_;
  DeviceBuffer device_;
};

}  // namespace tigon::testing
