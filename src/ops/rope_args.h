// RoPE arguments after validation: per tensor (q, k) sizes and strides, the shared cos / sin
// strides (0 where they broadcast) and the dtypes. The contract between the validation layer
// (src/ops/rope.cpp) and the backends, which may assume all of it holds.
#pragma once

#include <cstdint>

#include "tigon/dtype.h"

namespace tigon::detail {

// One rotated tensor (q or k) of shape [N0, N1, N2, D], read from `in`, written to `out`.
struct RopeTensor {
  const void* in = nullptr;
  void* out = nullptr;  // may equal in (same strides): in place
  std::int64_t sizes[3] = {};
  std::int64_t dim = 0;  // D, >= rotary_dim
  std::int64_t in_strides[4] = {};
  std::int64_t out_strides[4] = {};
  bool write_pass = true;  // false: channels >= rotary_dim are left as they are (in-place forward)

  std::int64_t rows() const { return sizes[0] * sizes[1] * sizes[2]; }
};

struct RopeArgs {
  RopeTensor tensors[2];
  int count = 0;  // 1 (q) or 2 (q, k); tensors with no rows are left out
  const void* cos = nullptr;
  const void* sin = nullptr;
  std::int64_t cos_strides[4] = {};  // 0 in every broadcast dimension
  std::int64_t sin_strides[4] = {};
  std::int64_t rotary_dim = 0;        // R: even, >= 2
  DType x_dtype = DType::kFloat32;    // T: q / k / dx dtype
  DType cos_dtype = DType::kFloat32;  // also sin's
  bool backward = false;              // in: dy (dtype P), out: dx (dtype T)
};

}  // namespace tigon::detail

namespace tigon::cpu {
void rope(const detail::RopeArgs& args);
}  // namespace tigon::cpu

namespace tigon::cuda {
void rope(const detail::RopeArgs& args, int device, void* stream);
}  // namespace tigon::cuda
