// A sum in a fixed order that the compiler can vectorize: kLanes independent accumulators of type
// Acc (float32 by default; double where the sum's terms are many and its rounding matters, e.g. a
// loss's denominator), element j going to lane j % kLanes, then a fixed pairwise tree. Same
// inputs, same bits.
#pragma once

#include <cstdint>

namespace tigon::cpu {

inline constexpr int kLanes = 16;

template <typename Acc = float, typename Term>
inline Acc lane_sum(std::int64_t n, Term&& term) {
  Acc acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += term(j + l);
  }
  for (int l = 0; j + l < n; ++l) acc[l] += term(j + l);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

}  // namespace tigon::cpu
