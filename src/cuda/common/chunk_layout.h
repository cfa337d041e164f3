// Host-side checks for the 16-byte chunk path of row_chunk.cuh: whether every row of every
// operand can be read and written as 16-byte packs of kChunk elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace tigon::cuda {

// Every pointer 16-byte aligned, every row stride a multiple of 16 bytes (or a single row), and
// rows made of whole chunks of 8 elements.
inline bool chunks_vectorizable(std::size_t element_bytes, std::int64_t rows, std::int64_t hidden,
                                std::initializer_list<const void*> pointers,
                                std::initializer_list<std::int64_t> row_strides) {
  if (hidden % 8 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  }
  if (rows == 1) return true;
  for (std::int64_t s : row_strides) {
    if ((s * static_cast<std::int64_t>(element_bytes)) % 16 != 0) return false;
  }
  return true;
}

}  // namespace tigon::cuda
