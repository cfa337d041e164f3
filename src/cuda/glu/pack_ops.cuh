// Per-pack arithmetic of the SwiGLU / GeGLU kernels for 16-bit types: P elements of a (and b, dy)
// in registers to the output pack's raw words, with the fast gate of cuda/glu/glu_fast.cuh (bitwise
// equal to math::Glu, which takes over per pair (forward) or per pack (backward) where the fast
// value does not decide the rounding). float32 uses math::Glu directly (kernels.cuh): no rounding
// there to hide an approximation's error in.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/vector_access.cuh"
#include "cuda/glu/glu_fast.cuh"
#include "math/glu.h"

namespace tigon::cuda::glu {

template <typename T>
inline constexpr bool kFastGate = sizeof(T) == 2
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
                                  && false  // cvt.rn.bf16x2 / f16x2 need sm_80
#endif
    ;

// from_float<T> of two elements in one word (the exact path's store, NaN canonical).
template <typename T>
__device__ __forceinline__ std::uint32_t exact_word(float lo, float hi) {
  return storage_bits(math::from_float<T>(lo)) | (storage_bits(math::from_float<T>(hi)) << 16);
}

// Each element of a 16-bit pack's words times m, rounded to T (math::Glu::scaled, the
// multipliers' steps): the pack ops then see T values, as they do without multipliers, so the
// fast gate's proof (which covers every T value of a) still holds for a * gate_multiplier.
template <typename T, int P>
__device__ __forceinline__ void scale_words(std::uint32_t (&w)[Pack<T, P>::kWords], float m) {
  static_assert(sizeof(T) == 2 && P % 2 == 0, "16-bit packs of an even size");
#pragma unroll
  for (int j = 0; j < P / 2; ++j) {
    const float lo = math::to_float(storage_from_bits<T>(w[j] & 0xffffu));
    const float hi = math::to_float(storage_from_bits<T>(w[j] >> 16));
    w[j] = exact_word<T>(lo * m, hi * m);
  }
}

template <GluActivation kAct, typename T, int P>
__device__ __forceinline__ void forward_pack(const Pack<T, P>& pa, const Pack<T, P>& pb,
                                             PackWords<T, P>& y) {
  using Math = math::Glu<kAct, T>;
  static_assert(kFastGate<T> && P % 2 == 0, "16-bit packs of an even size");
  namespace fast = math::fast;
  // Per pair: undecided[j] != 0 sends the pair to the exact path; a NaN product (a NaN or +-inf,
  // b NaN or infinite) the pack, for NaN's canonical bits. Both are predicates that the compares
  // accumulate for free; the rare path then re-checks pair by pair.
  std::uint32_t undecided[P / 2];
  bool all_fast = true, nan = false;
#pragma unroll
  for (int j = 0; j < P / 2; ++j) {
    const float a0 = pa.value(2 * j), a1 = pa.value(2 * j + 1);
    const fast::RoundedPair h = fast::gate_pair<kAct, T>(a0, a1);
    undecided[j] = h.undecided;
    all_fast = all_fast && h.undecided == 0;
    // Glu::forward: gate(a) * b, rounded to T.
    const float y0 = fast::low_value<T>(h.word) * pb.value(2 * j);
    const float y1 = fast::high_value<T>(h.word) * pb.value(2 * j + 1);
    nan = nan || y0 != y0 || y1 != y1;
    y[j] = fast::cvt2<T>(y0, y1);
  }
  if (!all_fast || nan) {  // rare: one branch per pack, then one per pair
#pragma unroll
    for (int j = 0; j < P / 2; ++j) {
      const float a0 = pa.value(2 * j), a1 = pa.value(2 * j + 1);
      if (nan || undecided[j] != 0) {
        y[j] =
            exact_word<T>(Math::gate(a0) * pb.value(2 * j), Math::gate(a1) * pb.value(2 * j + 1));
      }
    }
  }
}

// The exact path for a whole pack, out of line: inlined, its registers would spill in the fast
// path (64 per thread); as a call, the rare path alone saves and restores them.
template <GluActivation kAct, typename T, int P>
__device__ __noinline__ void exact_backward_pack(const Pack<T, P> pdy, const Pack<T, P> pa,
                                                 const Pack<T, P> pb, PackWords<T, P>& da,
                                                 PackWords<T, P>& db) {
  using Math = math::Glu<kAct, T>;
#pragma unroll
  for (int j = 0; j < P / 2; ++j) {
    const auto g0 = Math::backward(pdy.value(2 * j), pa.value(2 * j), pb.value(2 * j));
    const auto g1 = Math::backward(pdy.value(2 * j + 1), pa.value(2 * j + 1), pb.value(2 * j + 1));
    da[j] = storage_bits(g0.da) | (storage_bits(g1.da) << 16);
    db[j] = storage_bits(g0.db) | (storage_bits(g1.db) << 16);
  }
}

// Glu<kAct, T>::backward, element for element.
template <GluActivation kAct, typename T, int P>
__device__ __forceinline__ void backward_pack(const Pack<T, P>& pdy, const Pack<T, P>& pa,
                                              const Pack<T, P>& pb, PackWords<T, P>& da,
                                              PackWords<T, P>& db) {
  using Math = math::Glu<kAct, T>;
  using Act = typename Math::Act;
  static_assert(kFastGate<T> && P % 2 == 0, "16-bit packs of an even size");
  namespace fast = math::fast;
  // da is the exact chain (Act::backward) in both activations. SwiGLU: silu_backward computes
  // s = 1 / (1 + expf(-a)) exactly, and h = round_T(a * s) wherever that decides
  // round_T(a / (1 + expf(-a))) (the compiler shares s and expf(-a) with Act::backward). GeGLU:
  // gate(a) shares tanhf(inner) with Act::backward and costs two operations: exact.
  // The rare path redoes the whole pack: per-pair bookkeeping would spill at 64 registers.
  bool all_fast = true, nan = false;
#pragma unroll
  for (int j = 0; j < P / 2; ++j) {
    // One float per element, used by every formula below: the compiler shares expf(-a), s,
    // tanhf(inner) between the gate and Act::backward only for the same value (for Half the
    // conversion is an asm that it does not merge).
    const float a[2] = {pa.value(2 * j), pa.value(2 * j + 1)};
    float vda[2], vdb[2], h[2];
    if constexpr (kAct == GluActivation::kSilu) {
      const float s0 = 1.0f / (1.0f + math::act_exp(-a[0]));
      const float s1 = 1.0f / (1.0f + math::act_exp(-a[1]));
      const fast::RoundedPair hp = fast::silu_gate_pair_from_sigmoid<T>(a[0], s0, a[1], s1);
      all_fast = all_fast && hp.undecided == 0;
      h[0] = fast::low_value<T>(hp.word);
      h[1] = fast::high_value<T>(hp.word);
    } else {
      h[0] = Math::gate(a[0]);
      h[1] = Math::gate(a[1]);
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float dy = pdy.value(2 * j + q);
      const float g = math::round_to<T>(dy * pb.value(2 * j + q));  // dL/dh, a tensor of T
      vdb[q] = dy * h[q];
      vda[q] = Act::backward(g, a[q]);
      nan = nan || vda[q] != vda[q] || vdb[q] != vdb[q];
    }
    da[j] = fast::cvt2<T>(vda[0], vda[1]);
    db[j] = fast::cvt2<T>(vdb[0], vdb[1]);
  }
  if (!all_fast || nan) {  // rare
    // Results through local copies: da and db themselves stay in registers.
    PackWords<T, P> exact_da, exact_db;
    exact_backward_pack<kAct, T, P>(pdy, pa, pb, exact_da, exact_db);
#pragma unroll
    for (int j = 0; j < P / 2; ++j) {
      da[j] = exact_da[j];
      db[j] = exact_db[j];
    }
  }
}

}  // namespace tigon::cuda::glu
