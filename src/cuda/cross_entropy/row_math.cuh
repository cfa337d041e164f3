// The pieces both cross-entropy row kernels (two-pass rows, one-read slices) are made of: a part
// of a row's online state and its fixed-order merge over a CTA, a pack's contribution to it, a
// pack's gradient, and a row's loss terms. The formulas are src/math/cross_entropy.h.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/cross_entropy/row_params.h"
#include "math/cross_entropy.h"
#include "math/float_types.h"

namespace tigon::cuda::cross_entropy {

// The options a row applies; compile-time constants (none) for kPlain rows, so the per-element
// loops of the common case carry no option branches.
struct RowOptions {
  float softcap;
  float inv_softcap;
  bool smoothing;
  const float* weights;  // float32 class weights or null
  bool argmax;           // the row's argmax (predictions, token accuracy)
};

template <bool kPlain>
__device__ __forceinline__ RowOptions row_options(const RowParams& p) {
  RowOptions o;
  o.softcap = kPlain ? 0.0f : p.softcap;
  o.inv_softcap = o.softcap > 0.0f ? 1.0f / o.softcap : 0.0f;
  o.smoothing = !kPlain && p.label_smoothing != 0.0f;
  o.weights = kPlain ? nullptr : p.weights;
  o.argmax = !kPlain && p.argmax;
  return o;
}

// w_y (1 without class weights, NaN for an out-of-range target).
__device__ __forceinline__ float target_weight(const RowOptions& o, std::int64_t y, bool in_range) {
  return o.weights == nullptr ? 1.0f : (in_range ? o.weights[y] : NAN);
}

// The online state of part of a row (a thread's packs, a CTA's, a cluster's) and the capped
// target logit c_y if the part holds the target class, else NaN (so an out-of-range target gives
// NaN, as it must). Exactly one part holds an in-range target, hence "ours, else theirs" merges
// the same way in either order.
struct PartState {
  math::OnlineLse lse;
  float target = NAN;

  __device__ __forceinline__ void merge(const PartState& o) {
    lse.merge(o.lse);
    if (isnan(target)) target = o.target;
  }
  __device__ __forceinline__ float4 packed() const {
    return make_float4(lse.max, lse.sum, lse.weighted_sum, target);
  }
  __device__ __forceinline__ static PartState unpacked(float4 v) {
    PartState s;
    s.lse = {v.x, v.y, v.z};
    s.target = v.w;
    return s;
  }
};

// Floats of scratch block_merge needs.
inline constexpr int kMergeScratchPerWarp = 4;

// An argmax as two floats (the index's bits in y), for the cluster fold.
__device__ __forceinline__ float2 packed(const math::Argmax<int>& b) {
  return make_float2(b.value, __int_as_float(b.index));
}
__device__ __forceinline__ math::Argmax<int> unpacked(float2 v) {
  math::Argmax<int> b;
  b.value = v.x;
  b.index = __float_as_int(v.y);
  return b;
}

// The CTA-wide merge of per-thread states in a fixed order (xor butterfly within warps, then warps
// in index order through `scratch`, kMergeScratchPerWarp floats per warp). Every thread gets the
// same bits: a merge's float operations are commutative, so both lanes of a butterfly agree.
__device__ __forceinline__ PartState block_merge(PartState s, float* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    PartState other;
    other.lse.max = __shfl_xor_sync(0xffffffffu, s.lse.max, o);
    other.lse.sum = __shfl_xor_sync(0xffffffffu, s.lse.sum, o);
    other.lse.weighted_sum = __shfl_xor_sync(0xffffffffu, s.lse.weighted_sum, o);
    other.target = __shfl_xor_sync(0xffffffffu, s.target, o);
    s.merge(other);
  }
  const int warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  float4* slots = reinterpret_cast<float4*>(scratch);
  __syncthreads();  // scratch may still be read by the previous row
  if (threadIdx.x % kWarpSize == 0) slots[warp] = s.packed();
  __syncthreads();
  PartState total = PartState::unpacked(slots[0]);
  for (int w = 1; w < warps; ++w) total.merge(PartState::unpacked(slots[w]));
  return total;
}

// The CTA-wide argmax of per-thread parts (a float2 per warp of `scratch`), to every thread.
// argmax_better is a total order, so any merge order gives every thread the same class.
__device__ __forceinline__ math::Argmax<int> block_argmax(math::Argmax<int> b, float2* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    math::Argmax<int> other;
    other.value = __shfl_xor_sync(0xffffffffu, b.value, o);
    other.index = __shfl_xor_sync(0xffffffffu, b.index, o);
    b.merge(other);
  }
  const int warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  __syncthreads();  // scratch may still be read by the previous row
  if (threadIdx.x % kWarpSize == 0) scratch[warp] = packed(b);
  __syncthreads();
  for (int w = 0; w < warps; ++w) b.merge(unpacked(scratch[w]));
  return b;
}

// Where a row's target class lies in packs of P (pack -1: nowhere, for an out-of-range target),
// found once per row, so that per pack one integer compare tells whether the pack holds it and the
// per-element loops carry no 64-bit index arithmetic.
struct TargetSlot {
  int pack = -1;  // 32-bit: V <= 2^30 on CUDA (checked by the launcher)
  int lane = 0;
};

template <int P>
__device__ __forceinline__ TargetSlot target_slot(std::int64_t y, bool in_range) {
  return in_range ? TargetSlot{static_cast<int>(y / P), static_cast<int>(y % P)} : TargetSlot{};
}

// The target's position within pack k, -1 if the pack does not hold it.
template <typename Index>
__device__ __forceinline__ int target_lane(const TargetSlot& t, Index k) {
  return k == t.pack ? t.lane : -1;
}

// Adds pack k of the row (its P logits) to a part's state: online max and sum of exp in base 2,
// the smoothing sum, the target's capped logit (`target`: its lane in this pack, or -1), whose
// exp stays out of the sum (added by ce_target_terms), and with o.argmax the part's argmax
// `best`. Per element an FFMA, an ex2 and an add for plain rows.
template <typename T, int P, typename Index>
__device__ __forceinline__ void accumulate_pack(PartState& st, math::Argmax<int>& best,
                                                const Pack<T, P>& pk, Index k, int target,
                                                const RowOptions& o) {
  float c[P];
  float pm = -INFINITY;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    c[i] = math::cap_logit(pk.value(i), o.softcap, o.inv_softcap);
    pm = fmaxf(pm, c[i]);
  }
  if (o.argmax) {
#pragma unroll
    for (int i = 0; i < P; ++i) best.add(c[i], static_cast<int>(k) * P + i);
  }
  math::OnlineLse& s = st.lse;
  // Selects, not a branch: across a branch the compiler keeps no pack values in registers and
  // unpacks them again (integer instructions, which this loop is short of). While the max is
  // -inf the sum is 0 (or NaN, which stays NaN), so 2^-inf = 0 rescales it correctly.
  const bool grows = pm > s.max;
  const float rescale = math::fast_exp2((s.max - pm) * math::kLog2e);
  s.sum = grows ? s.sum * rescale : s.sum;
  s.max = grows ? pm : s.max;
  const float m_log2 = (s.max == -INFINITY ? 0.0f : s.max) * math::kLog2e;
  float e[P];
#pragma unroll
  for (int i = 0; i < P; ++i) e[i] = math::fast_exp2(c[i] * math::kLog2e - m_log2);
  if (target >= 0) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (i == target) st.target = c[i];
      e[i] = i == target ? 0.0f : e[i];
    }
  }
#pragma unroll
  for (int i = 0; i < P; ++i) s.sum += e[i];
  if (o.smoothing) {
#pragma unroll
    for (int i = 0; i < P; ++i) s.weighted_sum += (o.weights ? o.weights[k * P + i] : 1.0f) * c[i];
  }
}

// The gradient of pack k (dc_j times the cap's derivative; the target's from ce_grad_target),
// rounded once to T (`target`: the target's lane in this pack, or -1). Per element an FFMA, an
// ex2 and an FMUL for plain rows.
template <typename T, int P, typename Index>
__device__ __forceinline__ void grad_pack(const Pack<T, P>& pk, Index k, int target, float w_y,
                                          const RowOptions& o, const math::CeRow& r, T (&out)[P]) {
  float v[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const float c = math::cap_logit(pk.value(i), o.softcap, o.inv_softcap);
    const float w_j = o.weights ? o.weights[k * P + i] : 1.0f;
    v[i] = math::ce_grad(c, w_j, r) * math::cap_derivative(c, o.softcap, o.inv_softcap);
  }
  if (target >= 0) {
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (i != target) continue;
      const float c = math::cap_logit(pk.value(i), o.softcap, o.inv_softcap);
      v[i] = math::ce_grad_target(c, w_y, r) * math::cap_derivative(c, o.softcap, o.inv_softcap);
    }
  }
#pragma unroll
  for (int i = 0; i < P; ++i) out[i] = math::from_float<T>(v[i]);
}

// A row's results from its merged state: lse, 1 - p_y (-1 when not measured), the cross-entropy
// and z-loss terms (0 for an ignored row, whose lse is still the row's), and the factor of its
// gradient's scales a and b.
struct RowLoss {
  float lse;
  float one_minus_p_y;
  float ce;
  float z;
  float grad_factor;  // token scale times upstream (1 for kPlain rows: neither is set)
};

template <bool kPlain>
__device__ __forceinline__ RowLoss row_loss(const PartState& st, bool ignored, float w_y,
                                            float weight_total, const RowParams& p,
                                            std::int64_t row) {
  RowLoss l{st.lse.lse(), -1.0f, 0.0f, 0.0f, 1.0f};
  if (!ignored) {
    const math::CeTargetTerms t = math::ce_target_terms(st.lse.max, st.lse.sum, st.target);
    l.lse = t.lse;
    l.one_minus_p_y = t.one_minus_p_y;
    l.ce = math::ce_row_loss(t.lse, t.nll, w_y, st.lse.weighted_sum, weight_total,
                             p.label_smoothing, p.vocab);
    l.z = p.lse_square_scale * t.lse * t.lse;
    if constexpr (!kPlain) {
      const float given = p.token_scale ? p.token_scale[row] : 1.0f;
      const float s = math::ce_token_scale(given, p.token_scale_by_target_prob, st.target, t.lse);
      l.ce *= s;
      l.z *= s;
      l.grad_factor = s * (p.grad_loss ? p.grad_loss[p.per_row_upstream ? row : 0] : 1.0f);
    }
  }
  return l;
}

// The per-row outputs (one thread per row writes them).
__device__ __forceinline__ void store_row(const RowParams& p, std::int64_t row, const RowLoss& l) {
  if (p.lse) p.lse[row] = l.lse;
  p.row_ce[row] = l.ce;
  p.row_z[row] = l.z;
  if (p.loss_rows) p.loss_rows[row] = l.ce + l.z;
  if (p.z_rows) p.z_rows[row] = l.z;
}

// The row's prediction and hit from its merged argmax (one thread per row writes them).
__device__ __forceinline__ void store_prediction(const RowParams& p, std::int64_t row,
                                                 const math::Argmax<int>& best, bool ignored,
                                                 std::int64_t y) {
  const std::int64_t predicted = math::ce_prediction(best.index, ignored);
  if (p.predicted) p.predicted[row] = predicted;
  if (p.row_hit) p.row_hit[row] = predicted == y ? 1.0f : 0.0f;
}

}  // namespace tigon::cuda::cross_entropy
