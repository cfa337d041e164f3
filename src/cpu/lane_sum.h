// A sum in a fixed order that the compiler can vectorize: kLanes independent accumulators of type
// Acc (float32 by default; double where the sum's terms are many and its rounding matters, e.g. a
// loss's denominator), element j going to lane j % kLanes, then a fixed pairwise tree. Same
// inputs, same bits.
//
// Each lane sums blocks of kTermsPerBlock terms and adds each block's sum to its total: the error
// grows with the longest run of additions (kTermsPerBlock, then the number of blocks), not with
// n / kLanes; a 300000-class cross-entropy row with one running sum per lane was 1.3e-5 off.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tigon::cpu {

inline constexpr int kLanes = 16;
inline constexpr std::int64_t kTermsPerBlock = 64;

template <typename Acc = float, typename Term>
inline Acc lane_sum(std::int64_t n, Term&& term) {
  Acc total[kLanes] = {};
  for (std::int64_t start = 0; start < n; start += kLanes * kTermsPerBlock) {
    const std::int64_t end = std::min(n, start + kLanes * kTermsPerBlock);
    Acc acc[kLanes] = {};
    std::int64_t j = start;
    for (; j + kLanes <= end; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += term(j + l);
    }
    for (int l = 0; j + l < end; ++l) acc[l] += term(j + l);
    for (int l = 0; l < kLanes; ++l) total[l] = start == 0 ? acc[l] : total[l] + acc[l];
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) total[l] += total[l + width];
  }
  return total[0];
}

}  // namespace tigon::cpu
