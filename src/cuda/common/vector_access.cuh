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

// How a pack is read. kReadOnly: the read-only data path, only for data no kernel writes while it
// runs (the weight).
enum class Load { kDefault, kReadOnly };

namespace vector_detail {

template <Load kLoad, typename V>
__device__ __forceinline__ V load_one(const V* p) {
  if constexpr (kLoad == Load::kReadOnly) {
    return __ldg(p);
  } else {
    return *p;
  }
}

}  // namespace vector_detail

// The pack at src (aligned to kPackAlignment<T, P>).
template <typename T, int P, Load kLoad = Load::kDefault>
__device__ __forceinline__ Pack<T, P> load_pack(const T* src) {
  using vector_detail::load_one;
  constexpr std::size_t kBytes = sizeof(T) * P;
  Pack<T, P> pack;
  if constexpr (kBytes == 2) {
    pack.words[0] = load_one<kLoad>(reinterpret_cast<const unsigned short*>(src));
  } else if constexpr (kBytes == 4) {
    pack.words[0] = load_one<kLoad>(reinterpret_cast<const unsigned int*>(src));
  } else if constexpr (kBytes == 8) {
    const uint2 v = load_one<kLoad>(reinterpret_cast<const uint2*>(src));
    pack.words[0] = v.x;
    pack.words[1] = v.y;
  } else {
    static_assert(kBytes % 16 == 0, "packs are 2, 4, 8 or a multiple of 16 bytes");
#pragma unroll
    for (int c = 0; c < static_cast<int>(kBytes / 16); ++c) {
      const uint4 v = load_one<kLoad>(reinterpret_cast<const uint4*>(src) + c);
      pack.words[4 * c] = v.x;
      pack.words[4 * c + 1] = v.y;
      pack.words[4 * c + 2] = v.z;
      pack.words[4 * c + 3] = v.w;
    }
  }
  return pack;
}

// load_pack from global memory under an L2 cache policy (l2_policy.cuh): each 16-byte access
// carries the hint (ld.global.L2::cache_hint); narrower packs (the scalar path) are plain loads.
template <typename T, int P>
__device__ __forceinline__ Pack<T, P> load_pack_hinted(const T* src, std::uint64_t policy) {
  constexpr std::size_t kBytes = sizeof(T) * P;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kBytes >= 16) {
    Pack<T, P> pack;
#pragma unroll
    for (int c = 0; c < static_cast<int>(kBytes / 16); ++c) {
      asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(pack.words[4 * c]), "=r"(pack.words[4 * c + 1]),
                     "=r"(pack.words[4 * c + 2]), "=r"(pack.words[4 * c + 3])
                   : "l"(reinterpret_cast<const uint4*>(src) + c), "l"(policy));
    }
    return pack;
  }
#endif
  (void)policy;
  return load_pack<T, P>(src);
}

// The raw words of a pack of P elements of T, laid out as in Pack.
template <typename T, int P>
using PackWords = std::uint32_t[Pack<T, P>::kWords];

namespace vector_detail {

// The raw words of P elements, laid out as in Pack.
template <typename T, int P>
__device__ __forceinline__ void words_of(const T (&in)[P], PackWords<T, P>& w) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < P; ++i) w[i] = storage_bits(in[i]);
  } else if constexpr (P == 1) {
    w[0] = storage_bits(in[0]);
  } else {
#pragma unroll
    for (int i = 0; i < Pack<T, P>::kWords; ++i)
      w[i] = storage_bits(in[2 * i]) | (storage_bits(in[2 * i + 1]) << 16);
  }
}

// dst[0..P) = the words (dst aligned to kPackAlignment<T, P>). kGlobal: dst is global memory and
// every 16 bytes are written with one st.global.v4, because nvcc splits a uint4 assignment into
// four 4-byte stores where it loses track of the alignment (seen in the GLU kernels and in the
// cross-entropy slice kernel, whose stores sit between cp.async instructions).
template <bool kGlobal, typename T, int P>
__device__ __forceinline__ void store_words(T* dst, const PackWords<T, P>& w) {
  constexpr std::size_t kBytes = sizeof(T) * P;
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
      if constexpr (kGlobal) {
        asm volatile(
            "st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(reinterpret_cast<uint4*>(dst) + c),
            "r"(w[4 * c]), "r"(w[4 * c + 1]), "r"(w[4 * c + 2]), "r"(w[4 * c + 3]));
      } else {
        reinterpret_cast<uint4*>(dst)[c] =
            make_uint4(w[4 * c], w[4 * c + 1], w[4 * c + 2], w[4 * c + 3]);
      }
    }
  }
}

}  // namespace vector_detail

// dst[0..P) = in[0..P) (dst aligned to kPackAlignment<T, P>; global or shared memory).
template <typename T, int P>
__device__ __forceinline__ void store_pack(T* dst, const T (&in)[P]) {
  PackWords<T, P> w;
  vector_detail::words_of<T, P>(in, w);
  vector_detail::store_words<false, T, P>(dst, w);
}

// store_pack into global memory, each 16 bytes as one st.global.v4 (see store_words).
template <typename T, int P>
__device__ __forceinline__ void store_pack_global(T* dst, const T (&in)[P]) {
  PackWords<T, P> w;
  vector_detail::words_of<T, P>(in, w);
  vector_detail::store_words<true, T, P>(dst, w);
}

// The same from a pack's raw words (kernels that build the output words directly).
template <typename T, int P>
__device__ __forceinline__ void store_words_global(T* dst, const PackWords<T, P>& w) {
  vector_detail::store_words<true, T, P>(dst, w);
}

}  // namespace tigon::cuda
