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

// A parameter's storage type next to activations X: float32, or X (the only other dtype the
// norms' validation lets through).
template <typename X, typename F>
void dispatch_parameter(DType dtype, F&& f) {
  if (dtype == DType::kFloat32) {
    f(TypeTag<float>{});
  } else {
    f(TypeTag<X>{});
  }
}

// Calls f.template operator()<X, P1, P2>() with x's type and two parameters' types (a norm's
// weight and bias, or its gradients).
template <typename F>
void dispatch_norm_types(DType x_dtype, DType p1_dtype, DType p2_dtype, F&& f) {
  dispatch_dtype(x_dtype, [&](auto x_tag) {
    using X = typename decltype(x_tag)::type;
    dispatch_parameter<X>(p1_dtype, [&](auto p1_tag) {
      dispatch_parameter<X>(p2_dtype, [&](auto p2_tag) {
        f.template
        operator()<X, typename decltype(p1_tag)::type, typename decltype(p2_tag)::type>();
      });
    });
  });
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
