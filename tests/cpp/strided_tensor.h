// Test helper: an owning host buffer holding a 4-D strided view of float32/float16/bfloat16
// elements, laid out in any dimension order, with padding and a misaligned start on request.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "math/float_types.h"
#include "tigon/tensor.h"

namespace tigon::testing {

class StridedTensor {
 public:
  // order: the dimensions from outermost to innermost in memory (e.g. {0, 2, 1, 3} is HF's
  // [B, S, H, D] memory viewed as [B, H, S, D]); pad: extra elements after each innermost row;
  // last_stride: element stride of dimension 3 when it is innermost; misalign: elements the
  // view starts past a 16-byte aligned address.
  StridedTensor(DType dtype, std::array<std::int64_t, 4> sizes,
                std::array<int, 4> order = {0, 1, 2, 3}, std::int64_t pad = 0,
                std::int64_t last_stride = 1, int misalign = 0)
      : dtype_(dtype), sizes_(sizes), misalign_(misalign) {
    std::int64_t stride = 1;
    for (int k = 3; k >= 0; --k) {
      const int d = order[k];
      strides_[d] = stride;
      if (k == 3) {
        strides_[d] = last_stride;
        stride = (sizes_[d] - 1) * last_stride + 1 + pad;
      } else {
        stride *= sizes_[d];
      }
    }
    std::int64_t span = 1;
    for (int d = 0; d < 4; ++d) span += (sizes_[d] > 0 ? sizes_[d] - 1 : 0) * strides_[d];
    storage_.assign(static_cast<std::size_t>(span + misalign + 16) * element_size(dtype), 0);
  }

  TensorView view(Device device = Device::cpu(), void* data = nullptr) const {
    TensorView t;
    t.data = data ? data : const_cast<std::uint8_t*>(storage_.data()) + offset_bytes();
    t.dtype = dtype_;
    t.device = device;
    t.ndim = 4;
    for (int d = 0; d < 4; ++d) {
      t.sizes[d] = sizes_[d];
      t.strides[d] = strides_[d];
    }
    return t;
  }

  std::int64_t index(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return a * strides_[0] + b * strides_[1] + c * strides_[2] + d * strides_[3];
  }
  float get(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    return get_flat(index(a, b, c, d));
  }
  void set(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, float v) {
    set_flat(index(a, b, c, d), v);
  }
  std::uint32_t bits(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) const {
    const std::uint8_t* p = storage_.data() + offset_bytes() + index(a, b, c, d) * esize();
    if (dtype_ == DType::kFloat32) {
      std::uint32_t u;
      std::memcpy(&u, p, 4);
      return u;
    }
    std::uint16_t u;
    std::memcpy(&u, p, 2);
    return u;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (std::int64_t a = 0; a < sizes_[0]; ++a)
      for (std::int64_t b = 0; b < sizes_[1]; ++b)
        for (std::int64_t c = 0; c < sizes_[2]; ++c)
          for (std::int64_t d = 0; d < sizes_[3]; ++d) f(a, b, c, d);
  }

  void fill_normal(std::mt19937& rng, float stddev = 1.0f) {
    std::normal_distribution<float> dist(0.0f, stddev);
    for_each([&](auto a, auto b, auto c, auto d) { set(a, b, c, d, dist(rng)); });
  }

  DType dtype() const { return dtype_; }
  const std::array<std::int64_t, 4>& sizes() const { return sizes_; }
  std::int64_t numel() const { return sizes_[0] * sizes_[1] * sizes_[2] * sizes_[3]; }
  // The whole buffer (for copies to and from a device), and the view's offset into it.
  std::vector<std::uint8_t>& storage() { return storage_; }
  const std::vector<std::uint8_t>& storage() const { return storage_; }
  std::size_t offset_bytes() const { return static_cast<std::size_t>(misalign_) * esize(); }

 private:
  std::size_t esize() const { return element_size(dtype_); }
  float get_flat(std::int64_t i) const {
    const std::uint8_t* p = storage_.data() + offset_bytes() + i * esize();
    if (dtype_ == DType::kFloat32) {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    std::uint16_t u;
    std::memcpy(&u, p, 2);
    return dtype_ == DType::kFloat16 ? math::half_bits_to_float(u) : math::bf16_bits_to_float(u);
  }
  void set_flat(std::int64_t i, float v) {
    std::uint8_t* p = storage_.data() + offset_bytes() + i * esize();
    if (dtype_ == DType::kFloat32) {
      std::memcpy(p, &v, 4);
      return;
    }
    const std::uint16_t u =
        dtype_ == DType::kFloat16 ? math::float_to_half_bits(v) : math::float_to_bf16_bits(v);
    std::memcpy(p, &u, 2);
  }

  DType dtype_;
  std::array<std::int64_t, 4> sizes_;
  std::array<std::int64_t, 4> strides_{};
  int misalign_ = 0;
  std::vector<std::uint8_t> storage_;
};

}  // namespace tigon::testing
