// Loads and stores of "packs": P consecutive elements moved with the widest aligned accesses
// (16-byte words when the pack spans 16 bytes or more, else one 8-, 4- or 2-byte access).
// A loaded pack stays in registers as raw 32-bit words (two 16-bit elements per register, not one)
// and elements are extracted where they are used: that halves the registers a row of 16-bit data
// needs, which is what lets whole rows stay on chip without spilling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "math/float_types.h"

namespace tigon::cuda {

// Bytes of one memory access for a pack of kBytes bytes.
template <std::size_t kBytes>
inline constexpr std::size_t kAccessBytes = kBytes < 16 ? kBytes : 16;

// The alignment, in bytes, a pack of P elements of T needs for vector access.
template <typename T, int P>
inline constexpr std::size_t kPackAlignment = kAccessBytes<sizeof(T) * P>;

__device__ __forceinline__ std::uint32_t storage_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ std::uint32_t storage_bits(math::Half v) { return v.bits; }
__device__ __forceinline__ std::uint32_t storage_bits(math::BFloat16 v) { return v.bits; }

template <typename T>
__device__ __forceinline__ T storage_from_bits(std::uint32_t bits) {
  if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(bits);
  } else {
    return T{static_cast<std::uint16_t>(bits)};
  }
}

// P elements of storage type T as raw words; element i of a 16-bit type is the low (even i) or
// high (odd i) half of word i / 2, the lower address in the low half (little endian).
template <typename T, int P>
struct Pack {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "float, Half or BFloat16");
  static constexpr int kWords = static_cast<int>((sizeof(T) * P + 3) / 4);
  std::uint32_t words[kWords];

  __device__ __forceinline__ T at(int i) const {
    if constexpr (sizeof(T) == 4) {
      return storage_from_bits<T>(words[i]);
    } else {
      return storage_from_bits<T>(i % 2 == 0 ? words[i / 2] & 0xffffu : words[i / 2] >> 16);
    }
  }
  __device__ __forceinline__ float value(int i) const { return math::to_float(at(i)); }
};

namespace vector_detail {

template <bool kReadOnly, typename V>
__device__ __forceinline__ V load_one(const V* p) {
  if constexpr (kReadOnly) {
    return __ldg(p);
  } else {
    return *p;
  }
}

}  // namespace vector_detail

// The pack at src (aligned to kPackAlignment<T, P>). kReadOnly uses the read-only data path: only
// for data no kernel writes while it runs (the weight).
template <typename T, int P, bool kReadOnly = false>
__device__ __forceinline__ Pack<T, P> load_pack(const T* src) {
  using vector_detail::load_one;
  constexpr std::size_t kBytes = sizeof(T) * P;
  Pack<T, P> pack;
  if constexpr (kBytes == 2) {
    pack.words[0] = load_one<kReadOnly>(reinterpret_cast<const unsigned short*>(src));
  } else if constexpr (kBytes == 4) {
    pack.words[0] = load_one<kReadOnly>(reinterpret_cast<const unsigned int*>(src));
  } else if constexpr (kBytes == 8) {
    const uint2 v = load_one<kReadOnly>(reinterpret_cast<const uint2*>(src));
    pack.words[0] = v.x;
    pack.words[1] = v.y;
  } else {
    static_assert(kBytes % 16 == 0, "packs are 2, 4, 8 or a multiple of 16 bytes");
#pragma unroll
    for (int c = 0; c < static_cast<int>(kBytes / 16); ++c) {
      const uint4 v = load_one<kReadOnly>(reinterpret_cast<const uint4*>(src) + c);
      pack.words[4 * c] = v.x;
      pack.words[4 * c + 1] = v.y;
      pack.words[4 * c + 2] = v.z;
      pack.words[4 * c + 3] = v.w;
    }
  }
  return pack;
}

namespace vector_detail {

// The raw words of P elements, laid out as in Pack.
template <typename T, int P, int kWords>
__device__ __forceinline__ void words_of(const T (&in)[P], std::uint32_t (&w)[kWords]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < P; ++i) w[i] = storage_bits(in[i]);
  } else if constexpr (P == 1) {
    w[0] = storage_bits(in[0]);
  } else {
#pragma unroll
    for (int i = 0; i < kWords; ++i)
      w[i] = storage_bits(in[2 * i]) | (storage_bits(in[2 * i + 1]) << 16);
  }
}

}  // namespace vector_detail

// dst[0..P) = in[0..P) (dst aligned to kPackAlignment<T, P>).
template <typename T, int P>
__device__ __forceinline__ void store_pack(T* dst, const T (&in)[P]) {
  constexpr std::size_t kBytes = sizeof(T) * P;
  constexpr int kWords = static_cast<int>((kBytes + 3) / 4);
  std::uint32_t w[kWords];
  vector_detail::words_of<T, P>(in, w);
  if constexpr (kBytes == 2) {
    *reinterpret_cast<unsigned short*>(dst) = static_cast<unsigned short>(w[0]);
  } else if constexpr (kBytes == 4) {
    *reinterpret_cast<unsigned int*>(dst) = w[0];
  } else if constexpr (kBytes == 8) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
    static_assert(kBytes % 16 == 0, "packs are 2, 4, 8 or a multiple of 16 bytes");
#pragma unroll
    for (int c = 0; c < static_cast<int>(kBytes / 16); ++c) {
      reinterpret_cast<uint4*>(dst)[c] =
          make_uint4(w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]);
    }
  }
}

// store_pack of a 16-byte pack into GLOBAL memory, always as one 16-byte store (st.global.v4): the
// compiler may otherwise split a uint4 store into four 4-byte stores where it loses track of the
// alignment (seen in the slice kernel, whose stores sit between cp.async instructions).
template <typename T, int P>
__device__ __forceinline__ void store_pack_global_16(T* dst, const T (&in)[P]) {
  static_assert(sizeof(T) * P == 16, "one 16-byte pack");
  std::uint32_t w[4];
  vector_detail::words_of<T, P>(in, w);
  __stwb(reinterpret_cast<uint4*>(dst), make_uint4(w[0], w[1], w[2], w[3]));
}

}  // namespace tigon::cuda
