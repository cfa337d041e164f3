// Cross-entropy CUDA kernels. One CTA per row (a persistent grid strides over rows):
//  pass 1 reads the row once (16-byte packs, two in flight per thread), keeping an online
//         max / sum-of-exp in float32 per thread, merged across the CTA in a fixed order;
//  pass 2 (gradient) re-reads the row from a shared-memory copy of its first part and from L2
//         for the rest (the row was read microseconds earlier), and writes the gradient, which
//         may overwrite the logits (each element is read and then written by the same thread).
// Denominators and the final sums use one CTA with a fixed summation order: no float atomics,
// the same bits run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/async_copy.cuh"
#include "cuda/common/vector_access.cuh"
#include "math/cross_entropy.h"
#include "math/float_types.h"
#include "ops/cross_entropy_args.h"

namespace tigon::cuda::cross_entropy {

inline constexpr int kRowThreads = 512;
inline constexpr int kReduceThreads = 1024;
inline constexpr int kUnroll = 2;  // packs loaded before any is used: bytes in flight per thread
// Pass 1 of the 16-byte path streams the row through shared memory with cp.async, kAhead packs per
// thread ahead of the math: 32 KB in flight per CTA without costing registers (the kernel is at
// its 64-register bound). Packs outside the row cache land in a ring of kAhead slots per thread.
inline constexpr int kAhead = 4;
inline constexpr std::size_t kRingBytes = std::size_t{kAhead} * kRowThreads * 16;

enum class RowMode { kLoss, kLossGrad, kGrad };

// Workspace in floats: CeScales-like header, per-row terms, float32 class weights.
struct Layout {
  static constexpr std::int64_t kHeader = 8;  // weight_sum, count, a, b, weight_total, pad
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  bool forward = false;
  bool weighted = false;
  std::int64_t row_terms() const { return forward ? 2 * rows : 0; }
  std::int64_t weights_offset() const { return kHeader + row_terms(); }
  std::int64_t floats() const { return weights_offset() + (weighted ? vocab : 0); }
};

struct RowParams {
  const void* logits;
  std::int64_t logits_row_stride;
  const std::int64_t* target;
  void* grad;
  std::int64_t grad_row_stride;
  std::int64_t rows;
  std::int64_t vocab;
  std::int64_t ignore_index;
  float label_smoothing;
  float lse_square_scale;
  float softcap;
  const float* scales;   // workspace header (written by ce_prepare_kernel)
  const float* weights;  // float32 class weights or null
  float* row_ce;         // forward: per-row terms (workspace)
  float* row_z;
  float* loss_rows;        // kNone forward: loss[i] = ce_i + z_i (null otherwise)
  float* z_rows;           // kNone forward: z_loss[i] (or null)
  float* lse;              // forward: written if non-null; backward: read
  const float* grad_loss;  // backward upstream ([rows] for kNone, else one)
  bool per_row_upstream;
  std::int64_t cache_packs;  // packs of each row kept in shared memory between the passes
  // Dynamic shared memory: the cp.async ring (kRingBytes, 16-byte path only), then the row cache.
};

__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < warps; ++w) total += scratch[w];
  return total;
}

// Denominators and scales (one CTA): n, W_ce in row order per thread then a fixed tree;
// class weights to float32; W = sum of the class weights.
template <typename W>
__global__ void __launch_bounds__(kReduceThreads)
    ce_prepare_kernel(const std::int64_t* target, std::int64_t rows, std::int64_t ignore_index,
                      const W* weight, std::int64_t vocab, int reduction, const float* divisor,
                      float* header, float* weights_f32) {
  __shared__ float scratch[32];
  float wsum = 0.0f, count = 0.0f, wtotal = 0.0f;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const std::int64_t y = target[i];
    if (y == ignore_index) continue;
    const bool in_range = y >= 0 && y < vocab;
    wsum += weight == nullptr ? 1.0f : (in_range ? math::to_float(weight[y]) : NAN);
    count += 1.0f;
  }
  if (weight != nullptr) {
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float w = math::to_float(weight[j]);
      weights_f32[j] = w;
      wtotal += w;
    }
  }
  wsum = block_sum(wsum, scratch);
  count = block_sum(count, scratch);
  wtotal = weight == nullptr ? static_cast<float>(vocab) : block_sum(wtotal, scratch);
  if (threadIdx.x == 0) {
    float a = 1.0f, b = 1.0f;
    if (reduction == static_cast<int>(Reduction::kMean)) {
      a = math::safe_reciprocal(wsum);
      b = math::safe_reciprocal(count);
    } else if (reduction == static_cast<int>(Reduction::kSum) && divisor != nullptr) {
      a = b = math::safe_reciprocal(*divisor);
    }
    header[0] = wsum;
    header[1] = count;
    header[2] = a;
    header[3] = b;
    header[4] = wtotal;
  }
}

// loss = sum ce_i * a + sum z_i * b (one CTA, fixed order).
__global__ void __launch_bounds__(kReduceThreads)
    ce_finish_kernel(const float* header, const float* row_ce, const float* row_z,
                     std::int64_t rows, float* loss, float* z_loss) {
  __shared__ float scratch[32];
  float ce = 0.0f, z = 0.0f;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    ce += row_ce[i];
    z += row_z[i];
  }
  ce = block_sum(ce, scratch);
  z = block_sum(z, scratch);
  if (threadIdx.x == 0) {
    const float z_total = z * header[3];
    loss[0] = ce * header[2] + z_total;
    if (z_loss != nullptr) z_loss[0] = z_total;
  }
}

// The CTA-wide merge of per-thread online states, in a fixed order (xor butterfly within warps,
// then warps in index order). Every thread gets the same result.
__device__ __forceinline__ math::OnlineLse block_merge(math::OnlineLse s, float* scratch) {
  for (int o = 16; o > 0; o /= 2) {
    math::OnlineLse other;
    other.max = __shfl_xor_sync(0xffffffffu, s.max, o);
    other.sum = __shfl_xor_sync(0xffffffffu, s.sum, o);
    other.weighted_sum = __shfl_xor_sync(0xffffffffu, s.weighted_sum, o);
    s.merge(other);
  }
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by the previous row
  if (threadIdx.x % 32 == 0) {
    scratch[3 * warp] = s.max;
    scratch[3 * warp + 1] = s.sum;
    scratch[3 * warp + 2] = s.weighted_sum;
  }
  __syncthreads();
  math::OnlineLse total{scratch[0], scratch[1], scratch[2]};
  for (int w = 1; w < warps; ++w)
    total.merge({scratch[3 * w], scratch[3 * w + 1], scratch[3 * w + 2]});
  return total;
}

// The position of the row's target within pack k (-1 if elsewhere): compared once per pack, so
// the per-element loops carry no 64-bit index arithmetic.
template <int P>
__device__ __forceinline__ int target_in_pack(std::int64_t y, std::int64_t k) {
  const std::int64_t first = k * P;
  return y >= first && y < first + P ? static_cast<int>(y - first) : -1;
}

// kPlain: no softcap, no label smoothing, no class weights (the common case). Those options are
// then compile-time constants and the per-element loops are a load, an FFMA, an ex2 and an add
// (pass 1) or an FFMA, an ex2 and an FMUL (pass 2): the kernel stays memory-bound.
template <typename T, int P, RowMode kMode, bool kPlain>
__global__ void __launch_bounds__(kRowThreads, 2) ce_row_kernel(RowParams p) {
  extern __shared__ __align__(16) unsigned char cache_bytes[];
  __shared__ float scratch[3 * kRowThreads / 32];
  constexpr bool kForward = kMode != RowMode::kGrad;
  constexpr bool kStreamed = kForward && sizeof(T) * P == 16;
  T* ring = reinterpret_cast<T*>(cache_bytes);
  T* cache = reinterpret_cast<T*>(cache_bytes + (kStreamed ? kRingBytes : 0));
  constexpr bool kWritesGrad = kMode != RowMode::kLoss;
  const std::int64_t packs = p.vocab / P;
  const float softcap = kPlain ? 0.0f : p.softcap;
  const float inv_softcap = softcap > 0.0f ? 1.0f / softcap : 0.0f;
  const bool smoothing = !kPlain && p.label_smoothing != 0.0f;
  const float* weights = kPlain ? nullptr : p.weights;
  const float scale_a = p.scales[2], scale_b = p.scales[3], weight_total = p.scales[4];

  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(p.logits) + row * p.logits_row_stride;
    const std::int64_t y = p.target[row];
    const bool ignored = y == p.ignore_index;
    const bool in_range = y >= 0 && y < p.vocab;
    float lse = 0.0f, one_minus_p_y = -1.0f;

    if constexpr (kForward) {
      math::OnlineLse st;
      // The online max / sum of one pack k (16-byte or single-element).
      const auto accumulate = [&](const Pack<T, P>& pk, std::int64_t k) {
        float c[P];
        float pm = -INFINITY;
#pragma unroll
        for (int i = 0; i < P; ++i) {
          c[i] = math::cap_logit(pk.value(i), softcap, inv_softcap);
          pm = fmaxf(pm, c[i]);
        }
        if (pm > st.max) {
          st.sum =
              st.max == -INFINITY ? 0.0f : st.sum * math::fast_exp2((st.max - pm) * math::kLog2e);
          st.max = pm;
        }
        const float m_log2 = (st.max == -INFINITY ? 0.0f : st.max) * math::kLog2e;
        float e[P];
#pragma unroll
        for (int i = 0; i < P; ++i) e[i] = math::fast_exp2(c[i] * math::kLog2e - m_log2);
        const int target = target_in_pack<P>(y, k);
        if (target >= 0) {  // the target's term is added by ce_target_terms
#pragma unroll
          for (int i = 0; i < P; ++i) e[i] = i == target ? 0.0f : e[i];
        }
#pragma unroll
        for (int i = 0; i < P; ++i) st.sum += e[i];
        if (smoothing) {
#pragma unroll
          for (int i = 0; i < P; ++i)
            st.weighted_sum += (weights ? weights[k * P + i] : 1.0f) * c[i];
        }
      };
      if constexpr (kStreamed) {
        // Step j is pack k = threadIdx.x + j * kRowThreads: into the row cache when k is cached
        // (pass 2 reads it there), else into ring slot j % kAhead. Each thread reads back only its
        // own copies (no barrier); a slot is refilled right after its pack was consumed.
        const std::int64_t first = threadIdx.x;
        const std::int64_t steps =
            first < packs ? (packs - 1 - first) / kRowThreads + 1 : std::int64_t{0};
        const auto staged = [&](std::int64_t j) -> T* {
          const std::int64_t k = first + j * kRowThreads;
          return k < p.cache_packs ? cache + k * P
                                   : ring + ((j % kAhead) * kRowThreads + threadIdx.x) * P;
        };
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
          if (j < steps) async_copy_16(staged(j), x + (first + j * kRowThreads) * P);
          async_commit();
        }
        for (std::int64_t j = 0; j < steps; ++j) {
          async_wait<kAhead - 1>();  // step j has landed; the next kAhead - 1 may be in flight
          accumulate(load_pack<T, P>(staged(j)), first + j * kRowThreads);
          const std::int64_t next = j + kAhead;
          if (next < steps) async_copy_16(staged(next), x + (first + next * kRowThreads) * P);
          async_commit();  // always one group per step, so the wait count above stays exact
        }
      } else {
        for (std::int64_t k0 = threadIdx.x; k0 < packs; k0 += kUnroll * kRowThreads) {
          Pack<T, P> pk[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t k = k0 + u * kRowThreads;
            if (k < packs) pk[u] = load_pack<T, P>(x + k * P);
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const std::int64_t k = k0 + u * kRowThreads;
            if (k >= packs) break;
            if constexpr (kWritesGrad) {
              if (k < p.cache_packs) {
                T v[P];
#pragma unroll
                for (int i = 0; i < P; ++i) v[i] = pk[u].at(i);
                store_pack<T, P>(cache + k * P, v);
              }
            }
            accumulate(pk[u], k);
          }
        }
      }
      st = block_merge(st, scratch);
      float ce = 0.0f, z = 0.0f;
      lse = st.lse();
      if (!ignored) {
        const float w_y = weights == nullptr ? 1.0f : (in_range ? weights[y] : NAN);
        const float c_y =
            in_range ? math::cap_logit(math::to_float(x[y]), softcap, inv_softcap) : NAN;
        const math::CeTargetTerms t = math::ce_target_terms(st.max, st.sum, c_y);
        lse = t.lse;
        one_minus_p_y = t.one_minus_p_y;
        ce = math::ce_row_loss(lse, t.nll, w_y, st.weighted_sum, weight_total, p.label_smoothing,
                               p.vocab);
        z = p.lse_square_scale * lse * lse;
      }
      if (threadIdx.x == 0) {
        if (p.lse) p.lse[row] = lse;
        p.row_ce[row] = ce;
        p.row_z[row] = z;
        if (p.loss_rows) p.loss_rows[row] = ce + z;
        if (p.z_rows) p.z_rows[row] = z;
      }
    } else {
      lse = p.lse[row];
    }

    if constexpr (kWritesGrad) {
      if constexpr (kForward) __syncthreads();  // the shared-memory copy of the row is complete
      T* g = static_cast<T*>(p.grad) + row * p.grad_row_stride;
      float a = scale_a, b = scale_b;
      if constexpr (!kForward) {
        const float up = p.grad_loss[p.per_row_upstream ? row : 0];
        a *= up;
        b *= up;
      }
      const float w_y = weights == nullptr ? 1.0f : (in_range ? weights[y] : NAN);
      math::CeRow r = math::ce_row(lse, softcap, p.label_smoothing, p.lse_square_scale, w_y,
                                   weight_total, p.vocab, a, b);
      r.one_minus_p_y = one_minus_p_y;
      for (std::int64_t k0 = threadIdx.x; k0 < packs; k0 += kUnroll * kRowThreads) {
        Pack<T, P> pk[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t k = k0 + u * kRowThreads;
          if (k < packs && !ignored) {
            pk[u] = k < p.cache_packs ? load_pack<T, P>(cache + k * P) : load_pack<T, P>(x + k * P);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const std::int64_t k = k0 + u * kRowThreads;
          if (k >= packs) break;
          float v[P];
#pragma unroll
          for (int i = 0; i < P; ++i) v[i] = 0.0f;
          if (!ignored) {
#pragma unroll
            for (int i = 0; i < P; ++i) {
              const float c = math::cap_logit(pk[u].value(i), softcap, inv_softcap);
              const float w_j = weights ? weights[k * P + i] : 1.0f;
              v[i] = math::ce_grad(c, w_j, r) * math::cap_derivative(c, softcap, inv_softcap);
            }
            const int target = target_in_pack<P>(y, k);
            if (target >= 0) {
#pragma unroll
              for (int i = 0; i < P; ++i) {
                if (i != target) continue;
                const float c = math::cap_logit(pk[u].value(i), softcap, inv_softcap);
                v[i] =
                    math::ce_grad_target(c, w_y, r) * math::cap_derivative(c, softcap, inv_softcap);
              }
            }
          }
          T out[P];
#pragma unroll
          for (int i = 0; i < P; ++i) out[i] = math::from_float<T>(v[i]);
          store_pack<T, P>(g + k * P, out);
        }
      }
    }
    if constexpr (kWritesGrad && kForward) __syncthreads();  // cache reused by the next row
  }
}

// grad *= scale[0], skipped entirely when it is 1 (read on the device: no host synchronization).
template <typename T, int P>
__global__ void ce_scale_kernel(T* grad, std::int64_t rows, std::int64_t vocab,
                                std::int64_t row_stride, const float* scale) {
  const float s = *scale;
  if (s == 1.0f) return;
  const std::int64_t packs = vocab / P;
  const std::int64_t total = rows * packs;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = t / packs, k = t % packs;
    T* ptr = grad + row * row_stride + k * P;
    const Pack<T, P> in = load_pack<T, P>(ptr);
    T out[P];
#pragma unroll
    for (int i = 0; i < P; ++i) out[i] = math::from_float<T>(in.value(i) * s);
    store_pack<T, P>(ptr, out);
  }
}

}  // namespace tigon::cuda::cross_entropy
