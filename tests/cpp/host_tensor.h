// Test helper: an owning host buffer of float32/float16/bfloat16 elements with a TensorView.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "math/float_types.h"
#include "tigon/tensor.h"

namespace tigon::testing {

class HostTensor {
 public:
  HostTensor(DType dtype, std::vector<std::int64_t> sizes, std::int64_t row_stride = -1)
      : dtype_(dtype), sizes_(std::move(sizes)) {
    hidden_ = sizes_.empty() ? 1 : sizes_.back();
    rows_ = 1;
    for (std::size_t d = 0; d + 1 < sizes_.size(); ++d) rows_ *= sizes_[d];
    row_stride_ = row_stride < 0 ? hidden_ : row_stride;
    storage_.assign(
        static_cast<std::size_t>((rows_ > 0 ? (rows_ - 1) * row_stride_ : 0) + hidden_) *
                element_size(dtype) +
            16,
        0);
  }

  // Views the data starting `misalign` elements into the buffer (unaligned pointers).
  TensorView view(int misalign = 0) {
    TensorView t;
    t.data = storage_.data() + misalign * element_size(dtype_);
    t.dtype = dtype_;
    t.ndim = static_cast<int>(sizes_.size());
    std::int64_t stride = row_stride_;
    for (int d = t.ndim - 1; d >= 0; --d) {
      t.sizes[d] = sizes_[d];
      if (d == t.ndim - 1) {
        t.strides[d] = 1;
      } else {
        t.strides[d] = stride;
        stride *= sizes_[d];
      }
    }
    return t;
  }

  std::int64_t rows() const { return rows_; }
  std::int64_t hidden() const { return hidden_; }
  DType dtype() const { return dtype_; }
  std::uint8_t* bytes() { return storage_.data(); }
  std::size_t byte_count() const { return storage_.size(); }

  float get(std::int64_t row, std::int64_t col) const { return get_flat(row * row_stride_ + col); }
  void set(std::int64_t row, std::int64_t col, float v) { set_flat(row * row_stride_ + col, v); }
  // Element (row, col) of view(misalign).
  std::uint32_t bits(std::int64_t row, std::int64_t col, int misalign = 0) const {
    const std::size_t i = static_cast<std::size_t>(row * row_stride_ + col + misalign);
    if (dtype_ == DType::kFloat32) return math::float_bits(get_flat(i));
    const std::uint16_t* p = reinterpret_cast<const std::uint16_t*>(storage_.data());
    return p[i];
  }

  void fill_normal(std::mt19937& rng, float mean = 0.0f, float stddev = 1.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    for (std::int64_t r = 0; r < rows_; ++r)
      for (std::int64_t c = 0; c < hidden_; ++c) set(r, c, dist(rng));
  }

 private:
  float get_flat(std::int64_t i) const {
    const std::uint8_t* p = storage_.data() + i * element_size(dtype_);
    switch (dtype_) {
      case DType::kFloat32: return *reinterpret_cast<const float*>(p);
      case DType::kFloat16:
        return math::half_bits_to_float(*reinterpret_cast<const std::uint16_t*>(p));
      case DType::kBFloat16:
        return math::bf16_bits_to_float(*reinterpret_cast<const std::uint16_t*>(p));
    }
    return 0.0f;
  }
  void set_flat(std::int64_t i, float v) {
    std::uint8_t* p = storage_.data() + i * element_size(dtype_);
    switch (dtype_) {
      case DType::kFloat32: *reinterpret_cast<float*>(p) = v; break;
      case DType::kFloat16:
        *reinterpret_cast<std::uint16_t*>(p) = math::float_to_half_bits(v);
        break;
      case DType::kBFloat16:
        *reinterpret_cast<std::uint16_t*>(p) = math::float_to_bf16_bits(v);
        break;
    }
  }

  DType dtype_;
  std::vector<std::int64_t> sizes_;
  std::int64_t rows_ = 0, hidden_ = 0, row_stride_ = 0;
  std::vector<std::uint8_t> storage_;
};

// Units in the last place of `dtype` between two values of that dtype (their bit patterns are
// mapped to a monotonic integer line, so the distance across zero is counted correctly).
inline std::int64_t ulp_distance(DType dtype, float a, float b) {
  auto ordinal = [&](float v) -> std::int64_t {
    std::int64_t bits;
    std::int64_t sign_bit;
    if (dtype == DType::kFloat32) {
      bits = math::float_bits(v);
      sign_bit = std::int64_t{1} << 31;
    } else {
      bits = dtype == DType::kFloat16 ? math::float_to_half_bits(v) : math::float_to_bf16_bits(v);
      sign_bit = 1 << 15;
    }
    return bits & sign_bit ? -(bits & (sign_bit - 1)) : bits;
  };
  const std::int64_t d = ordinal(a) - ordinal(b);
  return d < 0 ? -d : d;
}

inline double epsilon_of(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1.0 / (1 << 23);
    case DType::kFloat16: return 1.0 / (1 << 10);
    case DType::kBFloat16: return 1.0 / (1 << 7);
  }
  return 0.0;
}

}  // namespace tigon::testing
