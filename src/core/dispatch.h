// Turns run-time options (dtype, casting mode, flags) into template parameters, one nested call
// per option, so kernels are written once per formula instead of once per switch case.
#pragma once

#include <type_traits>

#include "math/float_types.h"
#include "tigon/dtype.h"
#include "tigon/ops/rms_norm.h"

namespace tigon::detail {

template <typename T>
struct TypeTag {
  using type = T;
};

template <typename F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat16: return f(TypeTag<math::Half>{});
    case DType::kBFloat16: return f(TypeTag<math::BFloat16>{});
    case DType::kFloat32:
    case DType::kInt64: break;  // never a floating operand once validated
  }
  return f(TypeTag<float>{});
}

template <typename F>
decltype(auto) dispatch_casting_mode(CastingMode mode, F&& f) {
  switch (mode) {
    case CastingMode::kGemma: return f(std::integral_constant<CastingMode, CastingMode::kGemma>{});
    case CastingMode::kNone: return f(std::integral_constant<CastingMode, CastingMode::kNone>{});
    case CastingMode::kLlama: break;
  }
  return f(std::integral_constant<CastingMode, CastingMode::kLlama>{});
}

template <typename F>
decltype(auto) dispatch_bool(bool value, F&& f) {
  if (value) return f(std::true_type{});
  return f(std::false_type{});
}

}  // namespace tigon::detail
