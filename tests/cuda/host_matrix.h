// Host-side matrices for the CUDA backend tests: raw element buffers of any dtype with a row
// stride and an offset into their buffer (sentinel-filled outside the view), random fill through
// tigon's own conversions, and their device copies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_test_support.h"
#include "math/float_types.h"
#include "tigon/tigon.h"

namespace tigon::testing {

// Host data: raw element buffers of any dtype, random fill through tigon's own conversions.

inline float load_element(tigon::DType t, const unsigned char* base, std::int64_t i) {
  switch (t) {
    case tigon::DType::kFloat32: {
      float v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    case tigon::DType::kFloat16: {
      std::uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      return tigon::math::to_float(tigon::math::Half{b});
    }
    case tigon::DType::kBFloat16: {
      std::uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      return tigon::math::to_float(tigon::math::BFloat16{b});
    }
  }
  return 0.0f;
}

inline void store_element(tigon::DType t, unsigned char* base, std::int64_t i, float v) {
  switch (t) {
    case tigon::DType::kFloat32: std::memcpy(base + 4 * i, &v, 4); return;
    case tigon::DType::kFloat16: {
      const std::uint16_t b = tigon::math::from_float<tigon::math::Half>(v).bits;
      std::memcpy(base + 2 * i, &b, 2);
      return;
    }
    case tigon::DType::kBFloat16: {
      const std::uint16_t b = tigon::math::from_float<tigon::math::BFloat16>(v).bits;
      std::memcpy(base + 2 * i, &b, 2);
      return;
    }
  }
}

inline std::uint32_t element_bits(tigon::DType t, const unsigned char* base, std::int64_t i) {
  std::uint32_t bits = 0;
  const std::size_t size = std::min(tigon::element_size(t), sizeof bits);  // float types only
  std::memcpy(&bits, base + tigon::element_size(t) * i, size);
  return bits;
}

// A [rows, hidden] matrix with a row stride, starting `offset` elements into its buffer, held as
// raw bytes on the host. Elements outside the view (padding, the offset) hold a sentinel.
struct Matrix {
  tigon::DType dtype = tigon::DType::kFloat32;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  std::int64_t stride = 0;
  std::int64_t offset = 0;
  std::vector<unsigned char> bytes;

  Matrix() = default;
  Matrix(tigon::DType t, std::int64_t r, std::int64_t h, std::int64_t s, std::int64_t off)
      : dtype(t), rows(r), hidden(h), stride(s), offset(off) {
    const std::int64_t elements = offset + (rows > 0 ? (rows - 1) * stride + hidden : 0);
    bytes.assign(static_cast<std::size_t>(std::max<std::int64_t>(elements, 1)) * element_size(),
                 0xA5);
  }
  std::size_t element_size() const { return tigon::element_size(dtype); }
  std::int64_t index(std::int64_t r, std::int64_t j) const { return offset + r * stride + j; }
  float get(std::int64_t r, std::int64_t j) const {
    return load_element(dtype, bytes.data(), index(r, j));
  }
  void set(std::int64_t r, std::int64_t j, float v) {
    store_element(dtype, bytes.data(), index(r, j), v);
  }
  std::uint32_t bits(std::int64_t r, std::int64_t j) const {
    return element_bits(dtype, bytes.data(), index(r, j));
  }
  bool in_view(std::int64_t i) const {
    if (i < offset) return false;
    const std::int64_t r = (i - offset) / stride;
    return r < rows && (i - offset) % stride < hidden;
  }
  // A view of this layout over `base` (the start of a buffer laid out like `bytes`).
  tigon::TensorView view(void* base, tigon::Device device) const {
    tigon::TensorView v;
    v.data = static_cast<unsigned char*>(base) + offset * element_size();
    v.dtype = dtype;
    v.device = device;
    v.ndim = 2;
    v.sizes[0] = rows;
    v.sizes[1] = hidden;
    v.strides[0] = stride;
    v.strides[1] = 1;
    return v;
  }
  tigon::TensorView host_view() { return view(bytes.data(), tigon::Device::cpu()); }
  // The weight is 1-D: a [hidden] view of row 0.
  tigon::TensorView vector_view(void* base, tigon::Device device) const {
    tigon::TensorView v = view(base, device);
    v.ndim = 1;
    v.sizes[0] = hidden;
    v.strides[0] = 1;
    return v;
  }
};

inline void fill_normal(Matrix& m, std::mt19937& rng, float mean, float stddev) {
  std::normal_distribution<float> dist(mean, stddev);
  for (std::int64_t r = 0; r < m.rows; ++r) {
    for (std::int64_t j = 0; j < m.hidden; ++j) m.set(r, j, dist(rng));
  }
}

inline tigon::TensorView float_vector_view(float* data, std::int64_t n, tigon::Device device) {
  return tigon::TensorView::contiguous(data, tigon::DType::kFloat32, {n}, device);
}

// Device buffers.

inline DeviceBuffer to_device(const Matrix& m) {
  return DeviceBuffer(m.bytes.data(), m.bytes.size());
}

inline Matrix from_device(const DeviceBuffer& b, const Matrix& layout) {
  Matrix m = layout;
  b.download(m.bytes.data(), m.bytes.size());
  return m;
}

inline std::vector<float> floats_from_device(const DeviceBuffer& b, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  b.download(v.data(), sizeof(float) * v.size());
  return v;
}

}  // namespace tigon::testing
