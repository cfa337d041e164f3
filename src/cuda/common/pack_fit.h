// Whether a row kernel may read and write in packs of P elements: every pointer aligned for the
// pack, and every row starting on a pack boundary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tigon::cuda {

inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// Hidden size and every row stride a multiple of P, so each row starts on a pack boundary. With a
// single row the stride is never used.
inline bool strides_fit(std::int64_t rows, std::int64_t hidden, int p,
                        std::initializer_list<std::int64_t> strides) {
  if (hidden % p != 0) return false;
  if (rows == 1) return true;
  return std::all_of(strides.begin(), strides.end(), [p](std::int64_t s) { return s % p == 0; });
}

}  // namespace tigon::cuda
