// Non-owning views of tensors, the device they live on, workspace and stream handles.
// tigon never allocates: callers own every buffer and pass views of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "tigon/dtype.h"

namespace tigon {

enum class DeviceType : std::uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // CUDA ordinal; ignored for the CPU

  static constexpr Device cpu() noexcept { return {DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int ordinal = 0) noexcept { return {DeviceType::kCUDA, ordinal}; }
  friend constexpr bool operator==(Device a, Device b) noexcept {
    return a.type == b.type && (a.type == DeviceType::kCPU || a.index == b.index);
  }
  friend constexpr bool operator!=(Device a, Device b) noexcept { return !(a == b); }
};

// A strided view: element (i0, i1, ...) lives at data + sum(ik * strides[k]) elements.
// Sizes and strides are counted in elements, as in PyTorch.
struct TensorView {
  static constexpr int kMaxDims = 8;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  int ndim = 0;
  std::int64_t sizes[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};

  // A contiguous (row-major) view of `data` with the given sizes.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> sizes,
                               Device device = Device::cpu());

  std::int64_t numel() const noexcept;
  std::int64_t size(int dim) const noexcept { return sizes[dim < 0 ? dim + ndim : dim]; }
  std::int64_t stride(int dim) const noexcept { return strides[dim < 0 ? dim + ndim : dim]; }
  bool defined() const noexcept { return ndim > 0 || data != nullptr; }
};

// Scratch memory lent by the caller for one call; its size comes from the op's *_workspace_size
// query. It must live on the op's device and stay untouched until the call's stream has run it.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// The CUDA stream (a cudaStream_t) the op is enqueued on; nullptr is the legacy default stream.
// Ignored by the CPU backend, which runs synchronously on the calling thread (and its workers).
struct Stream {
  void* cuda_stream = nullptr;
};

}  // namespace tigon
