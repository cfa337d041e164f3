// Deterministic column sums over rows (a norm's dW, dB): rows are split into a fixed number of
// chunks, each accumulating its own float32 row of partials in row order, then the chunks are
// added in chunk order. The chunk count depends on the row count only, so the sums have the same
// bits on any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/parallel.h"
#include "math/float_types.h"

namespace tigon::cpu {

inline constexpr std::int64_t kMaxRowChunks = 32;

inline std::int64_t row_chunks(std::int64_t rows) { return std::min(rows, kMaxRowChunks); }

// out[j] = round_T(sum over chunks c in order of partials[c * hidden + j]).
template <typename T>
void finish_column_sums(const float* partials, std::int64_t chunks, std::int64_t hidden, T* out) {
  constexpr std::int64_t kColumnsPerTask = 1024;
  parallel_for((hidden + kColumnsPerTask - 1) / kColumnsPerTask, kColumnsPerTask * chunks,
               [&](std::int64_t task) {
                 const std::int64_t end = std::min(hidden, (task + 1) * kColumnsPerTask);
                 for (std::int64_t j = task * kColumnsPerTask; j < end; ++j) {
                   float sum = 0.0f;
                   for (std::int64_t c = 0; c < chunks; ++c) sum += partials[c * hidden + j];
                   out[j] = math::from_float<T>(sum);
                 }
               });
}

}  // namespace tigon::cpu
