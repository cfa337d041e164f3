// Test helpers shared by the op tests: rounding to a dtype, the spacing of a dtype's values, and
// the check that a validation error names the argument and says what was expected and got.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "math/float_types.h"
#include "tigon/tigon.h"

namespace tigon::testing {

// `v` rounded to the nearest value of `dtype` (through float, as the kernels store it).
inline double round_to(DType dtype, double v) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case DType::kFloat32: return f;
    case DType::kFloat16: return math::half_bits_to_float(math::float_to_half_bits(f));
    case DType::kBFloat16: return math::bf16_bits_to_float(math::float_to_bf16_bits(f));
  }
  return v;
}

// Spacing of dtype t's representable values at |v|.
inline double ulp_at(DType t, double v) {
  const int mantissa = t == DType::kFloat32 ? 23 : t == DType::kFloat16 ? 10 : 7;
  const int min_exponent = t == DType::kFloat16 ? -14 : -126;
  int e = 0;
  std::frexp(std::fabs(v), &e);
  const int lead = v == 0.0 ? min_exponent : std::max(e - 1, min_exponent);
  return std::ldexp(1.0, lead - mantissa);
}

// `call` must throw a tigon::Error with `code` whose message names argument `arg`, contains
// `expected_fragment` and says what it got; when `op` is given, the message also names tigon::op.
inline void expect_error(const std::function<void()>& call, ErrorCode code, const std::string& arg,
                         const std::string& expected_fragment = "expected",
                         const std::string& op = "") {
  try {
    call();
    ADD_FAILURE() << "no error for argument '" << arg << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), code) << what;
    EXPECT_NE(what.find("argument '" + arg + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(expected_fragment), std::string::npos) << what;
    EXPECT_NE(what.find("got"), std::string::npos) << what;
    if (!op.empty()) EXPECT_NE(what.find("tigon::" + op), std::string::npos) << what;
  }
}

}  // namespace tigon::testing
