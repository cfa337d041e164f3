// Host data for the norm CUDA tests: [rows, hidden] matrices of any dtype with row strides and
// offsets (sentinel-filled outside the view), random fill through tigon's own conversions, device
// copies, and the math::RmsNorm instantiation of a case. Shared by the RMSNorm and fused
// add + RMSNorm tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "cuda/cuda_test_support.h"
#include "math/float_types.h"
#include "math/rms_norm.h"
#include "tigon/tigon.h"

namespace tigon::testing {

// ---------------------------------------------------------------------------------------------
// Host data: raw element buffers of any dtype, random fill through tigon's own conversions.

inline float load_element(DType t, const unsigned char* base, std::int64_t i) {
  switch (t) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    case DType::kFloat16: {
      std::uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      return tigon::math::to_float(tigon::math::Half{b});
    }
    case DType::kBFloat16: {
      std::uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      return tigon::math::to_float(tigon::math::BFloat16{b});
    }
  }
  return 0.0f;
}

inline void store_element(DType t, unsigned char* base, std::int64_t i, float v) {
  switch (t) {
    case DType::kFloat32: std::memcpy(base + 4 * i, &v, 4); return;
    case DType::kFloat16: {
      const std::uint16_t b = tigon::math::from_float<tigon::math::Half>(v).bits;
      std::memcpy(base + 2 * i, &b, 2);
      return;
    }
    case DType::kBFloat16: {
      const std::uint16_t b = tigon::math::from_float<tigon::math::BFloat16>(v).bits;
      std::memcpy(base + 2 * i, &b, 2);
      return;
    }
  }
}

inline std::uint32_t element_bits(DType t, const unsigned char* base, std::int64_t i) {
  std::uint32_t bits = 0;
  const std::size_t size = std::min(tigon::element_size(t), sizeof bits);  // float types only
  std::memcpy(&bits, base + tigon::element_size(t) * i, size);
  return bits;
}

// A [rows, hidden] matrix with a row stride, starting `offset` elements into its buffer, held as
// raw bytes on the host. Elements outside the view (padding, the offset) hold a sentinel.
struct Matrix {
  DType dtype = DType::kFloat32;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  std::int64_t stride = 0;
  std::int64_t offset = 0;
  std::vector<unsigned char> bytes;

  Matrix() = default;
  Matrix(DType t, std::int64_t r, std::int64_t h, std::int64_t s, std::int64_t off)
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
  TensorView view(void* base, Device device) const {
    TensorView v;
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
  TensorView host_view() { return view(bytes.data(), Device::cpu()); }
  // The weight is 1-D: a [hidden] view of row 0.
  TensorView vector_view(void* base, Device device) const {
    TensorView v = view(base, device);
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

inline TensorView float_vector_view(float* data, std::int64_t n, Device device) {
  return TensorView::contiguous(data, DType::kFloat32, {n}, device);
}

// ---------------------------------------------------------------------------------------------
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

// Calls f.template operator()<Math, X, W>() for the case's options (W = X without a weight).
template <typename F>
inline void with_math(CastingMode mode, DType x, DType w, bool affine, F&& f) {
  tigon::detail::dispatch_casting_mode(mode, [&](auto m) {
    tigon::detail::dispatch_dtype(x, [&](auto x_tag) {
      using X = typename decltype(x_tag)::type;
      if (!affine) {
        f.template operator()<tigon::math::RmsNorm<decltype(m)::value, X, X, false>, X, X>();
        return;
      }
      tigon::detail::dispatch_dtype(w, [&](auto w_tag) {
        using W = typename decltype(w_tag)::type;
        f.template operator()<tigon::math::RmsNorm<decltype(m)::value, X, W, true>, X, W>();
      });
    });
  });
}

template <typename T>
inline T storage_from(const Matrix& m, std::int64_t r, std::int64_t j) {
  if constexpr (std::is_same_v<T, float>) {
    return m.get(r, j);
  } else {
    return T{static_cast<std::uint16_t>(m.bits(r, j))};
  }
}

template <typename T>
inline std::uint32_t storage_bits(T v) {
  if constexpr (std::is_same_v<T, float>) {
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  } else {
    return v.bits;
  }
}

// ---------------------------------------------------------------------------------------------
// Comparisons.

inline void expect_bitwise_equal(const Matrix& a, const Matrix& b, const char* what) {
  ASSERT_EQ(a.bytes.size(), b.bytes.size());
  std::int64_t first = -1;
  std::int64_t count = 0;
  const std::int64_t n = static_cast<std::int64_t>(a.bytes.size() / a.element_size());
  for (std::int64_t i = 0; i < n; ++i) {
    if (element_bits(a.dtype, a.bytes.data(), i) != element_bits(b.dtype, b.bytes.data(), i)) {
      if (first < 0) first = i;
      ++count;
    }
  }
  EXPECT_EQ(count, 0) << what << ": " << count << " elements differ, first at buffer index "
                      << first;
}

// Elements outside the view must still hold the sentinel: nothing was written out of bounds.
inline void expect_outside_untouched(const Matrix& m, const char* what) {
  const std::int64_t n = static_cast<std::int64_t>(m.bytes.size() / m.element_size());
  std::int64_t touched = 0;
  const std::uint32_t sentinel = m.element_size() == 4 ? 0xA5A5A5A5u : 0xA5A5u;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!m.in_view(i) && element_bits(m.dtype, m.bytes.data(), i) != sentinel) ++touched;
  }
  EXPECT_EQ(touched, 0) << what << ": elements outside the view were written";
}

// Same values element by element (the two matrices may have different layouts).
inline void expect_same_values(const Matrix& a, const Matrix& b, const char* what) {
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    for (std::int64_t j = 0; j < a.hidden; ++j) count += a.bits(r, j) != b.bits(r, j);
  }
  EXPECT_EQ(count, 0) << what << ": " << count << " elements differ";
}

}  // namespace tigon::testing
