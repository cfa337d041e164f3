// A thread's chunk of kChunk consecutive elements of a row, read and written either as 16-byte
// packs (kVector: the row pointer and the chunk's first column 16-byte aligned, the chunk inside
// the row) or one element at a time with columns past the row's end skipped. Both paths see the
// same elements in the same order, so a kernel gives the same bits on either. Used by the
// elementwise norms (DyT, PolyNorm). Also: a parameter element of a runtime dtype as float.
#pragma once

#include <cstdint>

#include "cuda/common/vector_access.cuh"
#include "math/float_types.h"
#include "tigon/tensor.h"

namespace tigon::cuda {

inline constexpr int kChunk = 8;

// Element `i` of a parameter stored as `dtype` (float32, float16 or bfloat16), as float.
__device__ __forceinline__ float load_param(const void* p, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kFloat16: return math::to_float(static_cast<const math::Half*>(p)[i]);
    case DType::kBFloat16: return math::to_float(static_cast<const math::BFloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// out[i] = row[col + i] as float (0 past `hidden` on the scalar path).
template <typename T, bool kVector>
__device__ __forceinline__ void load_chunk(const T* row, std::int64_t col, std::int64_t hidden,
                                           float (&out)[kChunk]) {
  if constexpr (kVector) {
    const Pack<T, kChunk> p = load_pack<T, kChunk>(row + col);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) out[i] = p.value(i);
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      out[i] = col + i < hidden ? math::to_float(row[col + i]) : 0.0f;
  }
}

// The chunk at `col` as raw storage (a Pack: two 16-bit elements a register, where load_chunk's
// floats take one each), for kernels that hold several chunks in flight; element i is .value(i),
// 0 past `hidden` on the scalar path.
template <typename T, bool kVector>
__device__ __forceinline__ Pack<T, kChunk> load_chunk_raw(const T* row, std::int64_t col,
                                                          std::int64_t hidden) {
  if constexpr (kVector) {
    return load_pack<T, kChunk>(row + col);
  } else {
    T v[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) v[i] = col + i < hidden ? row[col + i] : T{};
    Pack<T, kChunk> p;
    vector_detail::words_of<T, kChunk>(v, p.words);
    return p;
  }
}

// row[col + i] = v[i] (only columns before `hidden` on the scalar path).
template <typename T, bool kVector>
__device__ __forceinline__ void store_chunk(T* row, std::int64_t col, std::int64_t hidden,
                                            const T (&v)[kChunk]) {
  if constexpr (kVector) {
    store_pack_global<T, kChunk>(row + col, v);
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (col + i < hidden) row[col + i] = v[i];
    }
  }
}

// The scalar path's mask: whether element i of the chunk at `col` is in the row.
__device__ __forceinline__ bool in_row(std::int64_t col, int i, std::int64_t hidden) {
  return col + i < hidden;
}

}  // namespace tigon::cuda
