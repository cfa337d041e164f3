// Cross-entropy CUDA kernels besides the one-read slice kernel (slice_kernel.cuh): denominators,
// the final sum, the gradient scaling, and the two-pass row kernel for the rows the slice kernel
// does not take (and the recompute backward). One CTA per row (a persistent grid strides over
// rows):
//  pass 1 reads the row once (16-byte packs streamed through shared memory), keeping an online
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
#include "cuda/common/grid_dependency.cuh"
#include "cuda/common/l2_policy.cuh"
#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "cuda/cross_entropy/row_math.cuh"
#include "cuda/cross_entropy/row_params.h"
#include "math/cross_entropy.h"
#include "math/float_types.h"
#include "ops/cross_entropy_args.h"

namespace tigon::cuda::cross_entropy {

// A value the compiler must keep in a register from here on (it cannot see through the empty asm,
// so it cannot rematerialize the computation that produced it). A pointer out of it is no longer
// known to be global, so pass 2's loads become generic LD rather than LDG: measured faster here
// (H200, 8192 x 128256 in place: 1.339 ms against 1.385 ms pinning the row offset instead).
template <typename V>
__device__ __forceinline__ V* in_register(V* v) {
  asm("" : "+l"(v));
  return v;
}

inline constexpr int kRowThreads = 512;
inline constexpr int kReduceThreads = 1024;
inline constexpr int kUnroll = 2;  // packs loaded before any is used: bytes in flight per thread
// Pass 1 of the 16-byte path streams the row through shared memory with cp.async, kAhead packs per
// thread ahead of the math: 32 KB in flight per CTA without costing registers (the kernel is at
// its 64-register bound). Packs outside the row cache land in a ring of kAhead slots per thread.
inline constexpr int kAhead = 4;
inline constexpr std::size_t kRingBytes = std::size_t{kAhead} * kRowThreads * 16;

// Workspace in floats: CeScales-like header, per-row terms (ce, z, hit), float32 class weights,
// and (forward, GPUs without clusters) the slice results (RowTerms::slices).
struct Layout {
  static constexpr std::int64_t kHeader = 8;  // weight_sum, count, a, b, weight_total, pad
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  bool forward = false;
  bool weighted = false;
  bool slices = false;
  std::int64_t row_terms() const { return forward ? 3 * rows : 0; }
  std::int64_t weights_offset() const { return kHeader + row_terms(); }
  std::int64_t slices_offset() const { return weights_offset() + (weighted ? vocab : 0); }
  std::int64_t floats() const {
    return slices_offset() + (forward && slices ? rows * detail::kSliceFloatsPerRow : 0);
  }
};

// The block's sum of v in a fixed order (xor butterfly, then warps in order), to every thread.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w) total += scratch[w];
  return total;
}

// Denominators and scales (one CTA): n, W_ce in float64, in row order per thread then a fixed
// tree, rounded once (a float32 sum of many class weights drifts: src/cpu/cross_entropy.cpp);
// class weights to float32; W = sum of the class weights.
template <typename W>
__global__ void __launch_bounds__(kReduceThreads)
    ce_prepare_kernel(const std::int64_t* target, std::int64_t rows, std::int64_t ignore_index,
                      const W* weight, std::int64_t vocab, int reduction, const float* divisor,
                      float* header, float* weights_f32) {
  allow_dependent_launch();  // the row kernel's first pass needs nothing of this kernel
  __shared__ float scratch[32];
  __shared__ double scratch64[32];
  double wsum64 = 0.0, count64 = 0.0;
  float wtotal = 0.0f;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const std::int64_t y = target[i];
    if (math::ce_ignored(y, ignore_index)) continue;
    const bool in_range = y >= 0 && y < vocab;
    wsum64 += weight == nullptr ? 1.0f : (in_range ? math::to_float(weight[y]) : NAN);
    count64 += 1.0;
  }
  if (weight != nullptr) {
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float w = math::to_float(weight[j]);
      weights_f32[j] = w;
      wtotal += w;
    }
  }
  const auto wsum = static_cast<float>(block_sum(wsum64, scratch64));
  const auto count = static_cast<float>(block_sum(count64, scratch64));
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

// loss = sum ce_i * a + sum z_i * b (one CTA, fixed order); the token accuracy from the hits
// when `accuracy` is set.
__global__ void __launch_bounds__(kReduceThreads)
    ce_finish_kernel(const float* header, const float* row_ce, const float* row_z,
                     const float* row_hit, std::int64_t rows, float* loss, float* z_loss,
                     float* accuracy) {
  wait_for_prior_grid();  // the row kernel's per-row terms
  __shared__ double scratch[32];
  double ce64 = 0.0, z64 = 0.0;  // as the denominators: float64, rounded once
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    ce64 += row_ce[i];
    z64 += row_z[i];
  }
  const auto ce = static_cast<float>(block_sum(ce64, scratch));
  const auto z = static_cast<float>(block_sum(z64, scratch));
  if (threadIdx.x == 0) {
    const float z_total = z * header[3];
    loss[0] = ce * header[2] + z_total;
    if (z_loss != nullptr) z_loss[0] = z_total;
  }
  if (accuracy != nullptr) {  // the same for every thread
    double hits = 0.0;        // exact: a count
    for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) hits += row_hit[i];
    hits = block_sum(hits, scratch);
    if (threadIdx.x == 0) accuracy[0] = math::ce_accuracy(hits, header[1]);
  }
}

// A gradient pack to global memory, under the L2 policy where the pack is 16 bytes.
template <typename T, int P>
__device__ __forceinline__ void store_gradient(T* dst, const T (&out)[P], std::uint64_t policy) {
  if constexpr (sizeof(T) * P == 16) {
    PackWords<T, P> w;
    vector_detail::words_of<T, P>(out, w);
    store_16_hinted(dst, w[0], w[1], w[2], w[3], policy);
  } else {
    store_pack<T, P>(dst, out);
  }
}

// kPlain: no softcap, no label smoothing, no class weights (the common case). Those options are
// then compile-time constants and the per-element loops are a load, an FFMA, an ex2 and an add
// (pass 1) or an FFMA, an ex2 and an FMUL (pass 2): the kernel stays memory-bound.
template <typename T, int P, RowMode kMode, bool kPlain>
__global__ void __launch_bounds__(kRowThreads, 2) ce_row_kernel(RowParams p) {
  extern __shared__ __align__(16) unsigned char cache_bytes[];
  __shared__ __align__(16) float scratch[kMergeScratchPerWarp * kRowThreads / kWarpSize];
  __shared__ float2 best_scratch[kRowThreads / kWarpSize];
  constexpr bool kForward = kMode != RowMode::kGrad;
  constexpr bool kStreamed = kForward && sizeof(T) * P == 16;
  T* ring = reinterpret_cast<T*>(cache_bytes);
  T* cache = reinterpret_cast<T*>(cache_bytes + (kStreamed ? kRingBytes : 0));
  constexpr bool kWritesGrad = kMode != RowMode::kLoss;
  // Pack indices within a row are 32-bit (V <= 2^30, checked by the launcher, so that indices a
  // group past the row's end cannot overflow): 64-bit index math per pack would cost more integer
  // instructions than the pack's softmax and raise the register count past the kernel's
  // 64-register bound (the compiler then recomputes addresses).
  const int packs = static_cast<int>(p.vocab / P);
  const int cache_packs = static_cast<int>(p.cache_packs);
  const RowOptions o = row_options<kPlain>(p);
  // Launched as ce_prepare_kernel's dependent (cross_entropy.cu), this kernel may start before
  // prepare has written the header and the float32 class weights. Rows with class weights wait at
  // once; plain rows read neither until their first row's pass 1 is done, and wait there.
  allow_dependent_launch();
  float scale_a = 0.0f, scale_b = 0.0f, weight_total = 0.0f;
  const auto read_header = [&] {
    wait_for_prior_grid();
    scale_a = p.scales[2];
    scale_b = p.scales[3];
    weight_total = p.scales[4];
  };
  if constexpr (!kPlain) read_header();
  // L2 hints: the row's uncached part "evict last" in pass 1 (pass 2 re-reads it), the cached
  // part and the gradient "evict first".
  const std::uint64_t reread = l2_evict_last_policy();
  const std::uint64_t read_once = l2_evict_first_policy();

  for (std::int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    // Row pointers pinned in registers: the compiler would otherwise recompute row * stride (a
    // 64-bit multiply) at every pack to save the two registers.
    const T* x = in_register(static_cast<const T*>(p.logits) + row * p.logits_row_stride);
    const std::int64_t y = p.target[row];
    const bool ignored = math::ce_ignored(y, p.ignore_index);
    const bool in_range = y >= 0 && y < p.vocab;
    const float w_y = target_weight(o, y, in_range);
    const TargetSlot ts = target_slot<P>(y, in_range);
    float lse = 0.0f, one_minus_p_y = -1.0f, grad_factor = 1.0f;

    if constexpr (kForward) {
      PartState st;
      math::Argmax<int> best;  // with o.argmax
      if constexpr (kStreamed) {
        // Step j is pack k = threadIdx.x + j * kRowThreads: into the row cache when k is cached
        // (pass 2 reads it there), else into ring slot j % kAhead. Each thread reads back only its
        // own copies (no barrier); a slot is refilled right after its pack was consumed.
        const int first = static_cast<int>(threadIdx.x);
        const int steps = first < packs ? (packs - 1 - first) / kRowThreads + 1 : 0;
        const auto staged = [&](int j) -> T* {
          const int k = first + j * kRowThreads;
          return k < cache_packs ? cache + k * P : ring + ((j % kAhead) * kRowThreads + first) * P;
        };
        // Pass 2 re-reads from global memory exactly the packs pass 1 did not cache.
        const auto copy = [&](int j) {
          const int k = first + j * kRowThreads;
          async_copy_16_hinted(staged(j), x + k * P, k < cache_packs ? read_once : reread);
        };
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
          if (j < steps) copy(j);
          async_commit();
        }
        for (int j = 0; j < steps; ++j) {
          async_wait<kAhead - 1>();  // step j has landed; the next kAhead - 1 may be in flight
          const int k = first + j * kRowThreads;
          accumulate_pack<T, P>(st, best, load_pack<T, P>(staged(j)), k, target_lane(ts, k), o);
          const int next = j + kAhead;
          if (next < steps) copy(next);
          async_commit();  // always one group per step, so the wait count above stays exact
        }
      } else {
        for (int k0 = static_cast<int>(threadIdx.x); k0 < packs; k0 += kUnroll * kRowThreads) {
          Pack<T, P> pk[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int k = k0 + u * kRowThreads;
            if (k < packs) pk[u] = load_pack<T, P>(x + k * P);
          }
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) {
            const int k = k0 + u * kRowThreads;
            if (k >= packs) break;
            if constexpr (kWritesGrad) {
              if (k < cache_packs) {
                T v[P];
#pragma unroll
                for (int i = 0; i < P; ++i) v[i] = pk[u].at(i);
                store_pack<T, P>(cache + k * P, v);
              }
            }
            accumulate_pack<T, P>(st, best, pk[u], k, target_lane(ts, k), o);
          }
        }
      }
      const PartState merged = block_merge(st, scratch);
      if (o.argmax) best = block_argmax(best, best_scratch);
      if constexpr (kPlain) {
        if (row == blockIdx.x) read_header();
      }
      const RowLoss l = row_loss<kPlain>(merged, ignored, w_y, weight_total, p, row);
      lse = l.lse;
      one_minus_p_y = l.one_minus_p_y;
      grad_factor = l.grad_factor;
      if (threadIdx.x == 0) {
        store_row(p, row, l);
        if (o.argmax) store_prediction(p, row, best, ignored, y);
      }
    } else {
      if constexpr (kPlain) {
        if (row == blockIdx.x) read_header();
      }
      lse = p.lse[row];
    }

    if constexpr (kWritesGrad) {
      if constexpr (kForward) __syncthreads();  // the shared-memory copy of the row is complete
      T* g = in_register(static_cast<T*>(p.grad) + row * p.grad_row_stride);
      float a = scale_a, b = scale_b;
      if constexpr (!kForward) {
        const float up = p.grad_loss[p.per_row_upstream ? row : 0];
        a *= up;
        b *= up;
      } else if constexpr (!kPlain) {
        a *= grad_factor;
        b *= grad_factor;
      }
      math::CeRow r = math::ce_row(lse, o.softcap, p.label_smoothing, p.lse_square_scale, w_y,
                                   weight_total, p.vocab, a, b);
      r.one_minus_p_y = one_minus_p_y;
      constexpr int kGroup = kUnroll * kRowThreads;
      const int groups = (packs + kGroup - 1) / kGroup;
      for (int i = 0; i < groups; ++i) {
        // Pass 2 from the row's end, whose packs were read last and are the likeliest in L2.
        const int k0 = static_cast<int>(threadIdx.x) + (groups - 1 - i) * kGroup;
        Pack<T, P> pk[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int k = k0 + u * kRowThreads;
          if (k < packs && !ignored) {
            pk[u] = k < cache_packs ? load_pack<T, P>(cache + k * P) : load_pack<T, P>(x + k * P);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int k = k0 + u * kRowThreads;
          if (k >= packs) break;
          T out[P];
          if (ignored) {
#pragma unroll
            for (int i = 0; i < P; ++i) out[i] = math::from_float<T>(0.0f);
          } else {
            grad_pack<T, P>(pk[u], k, target_lane(ts, k), w_y, o, r, out);
          }
          store_gradient<T, P>(g + k * P, out, read_once);
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
