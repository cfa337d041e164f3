// Element types understood by tigon: floating-point activations and weights, int64 indices
// (cross-entropy targets).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tigon {

enum class DType : std::uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt64,  // indices only (cross-entropy targets)
};

constexpr std::size_t element_size(DType t) noexcept {
  return t == DType::kInt64 ? 8 : t == DType::kFloat32 ? 4 : 2;
}

constexpr bool is_floating(DType t) noexcept { return t != DType::kInt64; }

constexpr const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

// PyTorch's type promotion for a binary op between two floating tensors: equal types stay,
// anything with float32 is float32, and float16 with bfloat16 promotes to float32.
constexpr DType promote_types(DType a, DType b) noexcept { return a == b ? a : DType::kFloat32; }

}  // namespace tigon
