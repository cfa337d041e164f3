// The weight gradient in a 16-bit dtype T accumulated in float32 without a float32 copy of it
// (both backends follow this layout and this schedule).
//
// The [V, H] result in T has V*H*2 bytes: the float32 accumulators of V/2 rows. With
// R = ceil(V/2), rows [0, R) accumulate in float32 in the workspace (R*H floats) and rows [R, V)
// in the gradient's own storage read as floats [0, M), M = (V - R)*H. At the end:
//  (a) float j of the storage becomes T element D + j (D = R*H, the first element of row R), for
//      every j in [0, M), in place, in the rounds below;
//  (b) workspace float i becomes T element i, i in [0, D). Its bytes [0, 2D) overlap floats
//      [0, ceil(D/2)) of the storage: those below M were consumed by (a), the rest held nothing.
// Each element is rounded once from its float32 accumulator, so the result is bitwise the one of
// a float32 gradient rounded at the end.
//
// Why (a) is safe. Writing T element D + j stores bytes [2(D+j), 2(D+j)+2) of float
// f(j) = floor((D+j)/2), and f(j) >= j because j < M <= D. So a descending sequential loop is
// correct: a write only lands on the float just read or on ones already consumed (or past M).
// In parallel, a round [lo, hi) reads floats [lo, hi) and writes floats >= f(lo); with
// lo = max(0, 2*hi - D), f(lo) >= hi, so it writes none of its own inputs and none of the floats
// below lo that later rounds read (all rounds above it were read before it started).
// The first round would be empty for even V (D = M, lo = hi = M): a top block [M - top, M) goes
// first, read entirely before any of it is written (one CTA: loads, __syncthreads, stores; on the
// CPU a descending loop). Its writes land on floats >= f(M - top) >= M - top: itself or past M.
// After it, round sizes min(hi, D - hi) double (D - lo = 2(D - hi)): about log2(M / top) rounds.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tigon::detail {

struct DweightSplit {
  std::int64_t low_rows = 0;     // R = ceil(V/2): rows [0, R) accumulate in the workspace
  std::int64_t high_floats = 0;  // M = (V - R) * H: rows [R, V), floats [0, M) of the storage
  std::int64_t dst_offset = 0;   // D = R * H: storage float j becomes T element D + j
  std::int64_t low_floats() const { return dst_offset; }
};

// The top block both backends use (one CTA of 1024 threads x 8 floats on CUDA).
inline constexpr std::int64_t kNarrowingTopBlock = 8192;

inline DweightSplit dweight_split(std::int64_t vocab, std::int64_t hidden) {
  DweightSplit s;
  s.low_rows = (vocab + 1) / 2;
  s.high_floats = (vocab - s.low_rows) * hidden;
  s.dst_offset = s.low_rows * hidden;
  return s;
}

// Step (a): top(lo, hi) for the top block, then round(lo, hi) for each round, descending. Each
// must finish before the next starts (separate kernel launches on one stream).
template <typename Top, typename Round>
void for_each_narrowing_step(const DweightSplit& s, std::int64_t top_block, Top&& top,
                             Round&& round) {
  const std::int64_t m = s.high_floats, d = s.dst_offset;
  if (m == 0) return;
  std::int64_t hi = m - std::min(m, std::max<std::int64_t>(1, top_block));
  top(hi, m);
  while (hi > 0) {
    const std::int64_t lo = std::max<std::int64_t>(0, 2 * hi - d);
    round(lo, hi);
    hi = lo;
  }
}

}  // namespace tigon::detail
