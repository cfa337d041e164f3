// GroupNorm CUDA kernels. One CTA of kThreads threads per (sample, group) row of L elements; every
// element goes to a fixed thread and every sum has a fixed order (reduce.cuh), so the bits depend
// on the shape alone, never on the launch or the GPU. The formulas are math/group_norm.h's.
//
// Memory traffic: the forward reads the row three times (sum, centered squares, output) and the
// backward reads dy and x twice; the later passes of a row hit L2 while the CTA's row (at most a
// few hundred KB) is still resident.
#pragma once

#include <cstdint>

#include "cuda/common/reduce.cuh"
#include "cuda/common/vector_access.cuh"
#include "math/group_norm.h"
#include "ops/group_norm_args.h"

namespace tigon::cuda::group_norm {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / kWarpSize;

// Elements one access moves: 16 bytes.
template <typename X>
inline constexpr int kPack = static_cast<int>(16 / sizeof(X));

__device__ __forceinline__ bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Calls f(j, a[j], b[j]) (values as float) for the elements j of [0, length) owned by member
// `member` of `members` cooperating threads: chunks of kPack<X> consecutive elements, chunk i to
// member i % members, in increasing j per member. Full chunks at 16-byte-aligned addresses are
// read with one vector access each; the order of the calls is the same either way. b may be a (it
// is then read once).
template <typename X, typename F>
__device__ __forceinline__ void visit(const X* a, const X* b, std::int64_t length, int member,
                                      int members, F&& f) {
  constexpr int P = kPack<X>;
  const bool vector = aligned16(a) && aligned16(b);
  for (std::int64_t start = static_cast<std::int64_t>(P) * member; start < length;
       start += static_cast<std::int64_t>(P) * members) {
    if (vector && start + P <= length) {
      const Pack<X, P> pa = load_pack<X, P>(a + start);
      const Pack<X, P> pb = a == b ? pa : load_pack<X, P>(b + start);
#pragma unroll
      for (int i = 0; i < P; ++i) f(start + i, pa.value(i), pb.value(i));
    } else {
      for (int i = 0; i < P && start + i < length; ++i) {
        f(start + i, math::to_float(a[start + i]), math::to_float(b[start + i]));
      }
    }
  }
}

// out[j] = value(j, a[j], b[j]) for the elements of [0, length) this thread owns (visit's split
// over the CTA), stored a chunk at a time.
template <typename X, typename F>
__device__ __forceinline__ void map_row(const X* a, const X* b, X* out, std::int64_t length,
                                        F&& value) {
  constexpr int P = kPack<X>;
  const int member = static_cast<int>(threadIdx.x);
  const bool vector = aligned16(a) && aligned16(b) && aligned16(out);
  for (std::int64_t start = static_cast<std::int64_t>(P) * member; start < length;
       start += static_cast<std::int64_t>(P) * kThreads) {
    if (vector && start + P <= length) {
      const Pack<X, P> pa = load_pack<X, P>(a + start);
      const Pack<X, P> pb = load_pack<X, P>(b + start);
      X result[P];
#pragma unroll
      for (int i = 0; i < P; ++i) result[i] = value(start + i, pa.value(i), pb.value(i));
      store_pack_global<X, P>(out + start, result);
    } else {
      for (int i = 0; i < P && start + i < length; ++i) {
        out[start + i] =
            value(start + i, math::to_float(a[start + i]), math::to_float(b[start + i]));
      }
    }
  }
}

// The CTA's sum of v in a fixed order (per thread, then warps in order); `scratch` alternates
// between two kWarps-float buffers on consecutive calls (reduce.cuh's row_group_sum).
__device__ __forceinline__ float cta_sum(float v, float* scratch) {
  return row_group_sum(v, kThreads, scratch);
}

template <typename X, typename W, typename B>
__global__ void __launch_bounds__(kThreads) forward_kernel(detail::GroupNormFwdArgs a) {
  using Math = math::GroupNorm<X, W, B>;
  __shared__ float scratch[2][kWarps];
  const auto& s = a.shape;
  const std::int64_t length = s.group_size(), per_group = s.channels_per_group();
  const auto* w = static_cast<const W*>(a.weight);
  const auto* bias = static_cast<const B*>(a.bias);
  for (std::int64_t row = blockIdx.x; row < s.rows(); row += gridDim.x) {
    const std::int64_t n = row / s.groups, g = row % s.groups;
    const X* x = static_cast<const X*>(a.x) + n * a.x_sample_stride + g * length;
    X* y = static_cast<X*>(a.y) + n * a.y_sample_stride + g * length;
    float sum = 0.0f;
    visit(x, x, length, threadIdx.x, kThreads, [&](std::int64_t, float v, float) { sum += v; });
    const float mean = Math::mean(cta_sum(sum, scratch[0]), length);
    float sum_sq = 0.0f;
    visit(x, x, length, threadIdx.x, kThreads,
          [&](std::int64_t, float v, float) { sum_sq += Math::centered_square(v, mean); });
    const float r = Math::rstd(cta_sum(sum_sq, scratch[1]), length, a.params.eps);
    map_row(x, x, y, length, [&](std::int64_t j, float v, float) {
      const std::int64_t c = g * per_group + j / s.spatial;
      return Math::output(Math::normalized(v, mean, r), Math::weight(w, c), Math::bias(bias, c));
    });
    if (threadIdx.x == 0) {
      a.mean[row] = mean;
      a.rstd[row] = r;
    }
  }
}

// dx for each (sample, group) row, and the row's per-channel sums A = sum(dy * xhat) and
// B = sum(dy) into the workspace ([N, C] each): one warp per channel (channels k, k + kWarps, ...),
// its lanes splitting the channel's S elements as visit does.
template <typename X, typename W>
__global__ void __launch_bounds__(kThreads) backward_kernel(detail::GroupNormBwdArgs a) {
  using Math = math::GroupNorm<X, W, X>;
  __shared__ float scratch[2][kWarps];
  const auto& s = a.shape;
  const std::int64_t length = s.group_size(), per_group = s.channels_per_group();
  const auto* w = static_cast<const W*>(a.weight);
  float* sums_dy_xhat = static_cast<float*>(a.workspace);
  float* sums_dy = sums_dy_xhat + s.samples * s.channels;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  for (std::int64_t row = blockIdx.x; row < s.rows(); row += gridDim.x) {
    const std::int64_t n = row / s.groups, g = row % s.groups;
    const X* dy = static_cast<const X*>(a.dy) + n * a.dy_sample_stride + g * length;
    const X* x = static_cast<const X*>(a.x) + n * a.x_sample_stride + g * length;
    X* dx = static_cast<X*>(a.dx) + n * a.dx_sample_stride + g * length;
    const float mean = a.mean[row], r = a.rstd[row];

    float weighted_a = 0.0f, weighted_b = 0.0f;  // this warp's channels, in channel order
    for (std::int64_t k = warp; k < per_group; k += kWarps) {
      const std::int64_t c = g * per_group + k, first = k * s.spatial;
      float sum_a = 0.0f, sum_b = 0.0f;
      visit(dy + first, x + first, s.spatial, lane, kWarpSize,
            [&](std::int64_t, float dyv, float xv) {
              sum_a += dyv * Math::normalized(xv, mean, r);
              sum_b += dyv;
            });
      sum_a = lane_group_sum(sum_a, kWarpSize);
      sum_b = lane_group_sum(sum_b, kWarpSize);
      if (lane == 0) {
        sums_dy_xhat[n * s.channels + c] = sum_a;
        sums_dy[n * s.channels + c] = sum_b;
      }
      weighted_a += Math::weighted_channel_term(Math::weight(w, c), sum_a);
      weighted_b += Math::weighted_channel_term(Math::weight(w, c), sum_b);
    }
    // Warp totals in warp order: lane 0 of each warp holds its warp's value in every lane.
    const float c1 = Math::row_mean(
        cta_sum(threadIdx.x % kWarpSize == 0 ? weighted_a : 0.0f, scratch[0]), length);
    const float c2 = Math::row_mean(
        cta_sum(threadIdx.x % kWarpSize == 0 ? weighted_b : 0.0f, scratch[1]), length);
    // dx may be dy: every read of this row's dy above is done (cta_sum's barriers), and each
    // element below is read before it is written by the thread that owns it.
    map_row(dy, x, dx, length, [&](std::int64_t j, float dyv, float xv) {
      const float wc = Math::weight(w, g * per_group + j / s.spatial);
      return Math::grad_input(Math::grad_scaled(dyv, wc), Math::normalized(xv, mean, r), r, c1, c2);
    });
  }
}

// dw[c] = sum over n of A[n, c], db[c] = sum over n of B[n, c], in sample order.
template <typename W, typename DB>
__global__ void channel_sums_kernel(const float* sums_dy_xhat, const float* sums_dy,
                                    std::int64_t samples, std::int64_t channels, W* dw, DB* db) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  if (dw) {
    float total = 0.0f;
    for (std::int64_t n = 0; n < samples; ++n) total += sums_dy_xhat[n * channels + c];
    dw[c] = math::from_float<W>(total);
  }
  if (db) {
    float total = 0.0f;
    for (std::int64_t n = 0; n < samples; ++n) total += sums_dy[n * channels + c];
    db[c] = math::from_float<DB>(total);
  }
}

}  // namespace tigon::cuda::group_norm
