// Host side of the RMSNorm kernels for one casting mode: picks the vector width (16-byte packs when
// every pointer and row stride allows, else scalar), the row split, and launches. Included by one
// .cu per casting mode (rms_norm_<mode>.cu), so the kernels compile in parallel and each kernel is
// instantiated in exactly one translation unit.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/occupancy.h"
#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/bwd_kernels.cuh"
#include "cuda/rms_norm/fwd_kernels.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "cuda/rms_norm/modes.h"
#include "cuda/rms_norm/pack_ring.cuh"
#include "math/rms_norm.h"
#include "ops/rms_norm_args.h"

namespace tigon::cuda::rms_norm {

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

template <typename Math, int P>
bool fwd_vectorizable(const detail::RmsNormFwdArgs& a) {
  using T = MathTraits<Math>;
  return strides_fit(a.rows, a.hidden, P, {a.x_row_stride, a.y_row_stride}) &&
         aligned(a.x, kPackAlignment<typename T::X, P>) &&
         aligned(a.y, kPackAlignment<typename T::Y, P>) &&
         (!T::kAffine || aligned(a.weight, kPackAlignment<typename T::W, P>));
}

template <typename Math, int P>
bool bwd_vectorizable(const detail::RmsNormBwdArgs& a) {
  using T = MathTraits<Math>;
  return strides_fit(a.rows, a.hidden, P, {a.dy_row_stride, a.x_row_stride, a.dx_row_stride}) &&
         aligned(a.dy, kPackAlignment<typename T::Y, P>) &&
         aligned(a.x, kPackAlignment<typename T::X, P>) &&
         aligned(a.dx, kPackAlignment<typename T::X, P>) &&
         (!T::kAffine || (aligned(a.weight, kPackAlignment<typename T::W, P>) &&
                          aligned(a.workspace, kPackAlignment<float, P>)));
}

// Shared memory of the staged kernels beyond their ring (static, rounded up).
inline constexpr std::size_t kStagedStaticBytes = 4096;
static_assert(sizeof(RowSumShared) + sizeof(RingBarriers) <= kStagedStaticBytes,
              "the staged kernels' static shared memory");

// Launches `kernel` on a persistent grid of as many blocks (clusters of `split.slices` CTAs) as
// are resident at once, at most `units`, with `smem` bytes of dynamic shared memory. False (nothing
// launched) if the ring does not fit or not even one block is resident.
template <typename Params>
bool launch_persistent(void (*kernel)(Params), const RowSplit& split, std::int64_t units,
                       std::size_t smem, std::atomic<std::uint64_t>& configured, int device,
                       cudaStream_t stream, const Params& p) {
  const std::size_t limit = max_dynamic_smem(device, kStagedStaticBytes);
  if (smem > limit) return false;
  configure_once(kernel, configured, device, limit, true);
  const dim3 block(split.block_threads);
  const std::int64_t resident =
      resident_clusters(reinterpret_cast<const void*>(kernel), block, smem, split.slices, device);
  if (resident < 1) return false;
  const std::int64_t grid = std::min({units, resident, kMaxGridBlocks / split.slices});
  launch_kernel(kernel, grid * split.slices, block, smem, split.slices, stream, p);
  return true;
}

// One CTA (or cluster) per block of rows; kernels loop if the grid had to be capped. With
// Tuning::fwd_prefetch (1: rows over clusters, 2: all rows), a persistent grid of the CTAs (or
// clusters) resident at once instead, each prefetching its next row block into L2.
inline void launch_fwd_rows(void (*kernel)(FwdParams), FwdParams p, int device,
                            cudaStream_t stream) {
  std::int64_t units = ceil_div(p.rows, rows_per_block(p.split));
  const int prefetch = tuning().fwd_prefetch;
  if (prefetch == 2 || (prefetch == 1 && p.split.slices > 1)) {
    p.prefetch = true;
    const std::int64_t resident =
        resident_clusters(reinterpret_cast<const void*>(kernel), dim3(p.split.block_threads), 0,
                          p.split.slices, device);
    units = std::min(units, std::max<std::int64_t>(resident, 1));
  }
  const std::int64_t grid = std::min(units, kMaxGridBlocks / p.split.slices) * p.split.slices;
  launch_kernel(kernel, grid, dim3(p.split.block_threads), 0, p.split.slices, stream, p);
}

template <typename Math, int P>
void launch_fwd(const detail::RmsNormFwdArgs& a, bool clusters, int device, cudaStream_t stream) {
  using X = typename MathTraits<Math>::X;
  constexpr int kXSize = static_cast<int>(sizeof(X));
  FwdParams p;
  p.x = a.x;
  p.x_row_stride = a.x_row_stride;
  p.weight = a.weight;
  p.y = a.y;
  p.y_row_stride = a.y_row_stride;
  p.rstd = a.rstd;
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.eps = a.params.eps;
  p.offset = a.params.offset;
  const Tuning& tuning = rms_norm::tuning();
  p.cluster_exchange = tuning.cluster_exchange;
  p.split = split_row(a.hidden / P, fwd_policy(a.hidden, kXSize, clusters, tuning));
  if (p.split.two_pass) {
    p.l2_hints = tuning.fwd_two_pass_l2_hints;
    const std::int64_t grid = std::min(a.rows, kMaxGridBlocks);
    if (tuning.fwd_two_pass_threads == 1024) {
      launch_kernel(rms_norm_fwd_two_pass_kernel<Math, P, 1, 1024>, grid, dim3(1024), 0, 1, stream,
                    p);
      return;
    }
    launch_kernel(fwd_two_pass_unroll_for(a.hidden, kXSize, tuning) == 2
                      ? rms_norm_fwd_two_pass_kernel<Math, P, 2>
                      : rms_norm_fwd_two_pass_kernel<Math, P, 4>,
                  grid, dim3(kTwoPassThreads), 0, 1, stream, p);
    return;
  }
  if constexpr (sizeof(X) * P == 16) {
    p.stages = tuning.fwd_stages;
    if (p.stages >= 2 && clusters) {  // bulk copies: sm_90, as clusters
      static std::atomic<std::uint64_t> configured{0};
      const std::int64_t units = ceil_div(a.rows, rows_per_block(p.split));
      const std::size_t smem =
          PackRing<X, P, kFwdPacksPerThread>::bytes(p.stages, p.split.block_threads);
      if (launch_persistent(rms_norm_fwd_staged_kernel<Math, P>, p.split, units, smem, configured,
                            device, stream, p))
        return;
    }
  }
  // The light kernel for 16-bit x only: it was tuned on bf16, and as the float32 default (then
  // with 2 packs a thread) its different summation order moved the olmo2 float32 convergence test
  // past its tolerance (2026-12-05; the rows differ from the CPU backend's by the same 1-2 ulp
  // either way).
  if constexpr (P > 1 && sizeof(X) == 2) {
    const RowSplit light =
        light_fwd_split(a.hidden / P, a.hidden, kXSize, clusters,
                        light_fwd_max_row_threads(peak_memory_gbps(device), tuning), tuning);
    if (light.packs > 0) {
      p.split = light;
      launch_fwd_rows(tuning.fwd_light_packs_per_thread == 2 ? rms_norm_fwd_kernel<Math, P, 2>
                                                             : rms_norm_fwd_kernel<Math, P, 4>,
                      p, device, stream);
      return;
    }
  }
  launch_fwd_rows(rms_norm_fwd_kernel<Math, P>, p, device, stream);
}

// dx and the dW partial rows; the caller then launches the finishing kernel (dw_finish.cuh).
template <typename Math, int P>
void launch_bwd(const detail::RmsNormBwdArgs& a, bool clusters, int device, cudaStream_t stream) {
  using T = MathTraits<Math>;
  BwdParams p;
  p.dy = a.dy;
  p.dy_row_stride = a.dy_row_stride;
  p.x = a.x;
  p.x_row_stride = a.x_row_stride;
  p.weight = a.weight;
  p.rstd = a.rstd;
  p.dx = a.dx;
  p.dx_row_stride = a.dx_row_stride;
  p.partials = T::kAffine ? static_cast<float*>(a.workspace) : nullptr;
  p.rows = a.rows;
  p.hidden = a.hidden;
  p.offset = a.params.offset;
  p.groups = dw_groups(a.rows, a.hidden, static_cast<int>(sizeof(typename T::X)), tuning());

  p.cluster_exchange = tuning().cluster_exchange;
  p.split = split_row(a.hidden / P, bwd_policy(a.hidden, clusters, tuning()));
  p.prefetch = tuning().bwd_prefetch == 1 || (tuning().bwd_prefetch == 2 && p.split.slices > 1);
  // One CTA (or cluster) per dW group: which rows a group sums never depends on the grid.
  if (p.split.two_pass) {
    launch_kernel(rms_norm_bwd_two_pass_kernel<Math, P>, p.groups.groups, dim3(kTwoPassThreads), 0,
                  1, stream, p);
    return;
  }
  if constexpr (sizeof(typename T::X) * P == 16 && sizeof(typename T::Y) * P == 16) {
    p.stages = tuning().bwd_stages;
    if (p.stages >= 2 && clusters) {  // bulk copies: sm_90, as clusters
      static std::atomic<std::uint64_t> configured{0};
      if (launch_persistent(rms_norm_bwd_staged_kernel<Math, P>, p.split, p.groups.groups,
                            staged_bwd_bytes<Math, P>(p.split, p.stages), configured, device,
                            stream, p))
        return;
    }
  }
  // Several rows a block: their dW accumulators meet in one shared row slice (bwd_kernels.cuh).
  launch_kernel(rms_norm_bwd_kernel<Math, P>, p.groups.groups * p.split.slices,
                dim3(p.split.block_threads), sizeof(float) * dw_slot_floats<Math, P>(p.split),
                p.split.slices, stream, p);
}

// Calls f.template operator()<Math>() for the arguments' dtypes in casting mode kMode. Without a
// weight only W = X is instantiated (the validation layer sets weight_dtype = x_dtype then).
template <CastingMode kMode, typename Args, typename F>
void dispatch_dtypes(const Args& a, F&& f) {
  detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
    using X = typename decltype(x_tag)::type;
    if (a.weight == nullptr) {
      f.template operator()<math::RmsNorm<kMode, X, X, false>>();
      return;
    }
    detail::dispatch_dtype(a.weight_dtype, [&](auto w_tag) {
      using W = typename decltype(w_tag)::type;
      f.template operator()<math::RmsNorm<kMode, X, W, true>>();
    });
  });
}

// 16 bytes of x per pack on the vector path.
template <typename Math>
inline constexpr int kVectorPack = static_cast<int>(16 / sizeof(typename MathTraits<Math>::X));

template <CastingMode kMode>
void fwd_for_mode(const detail::RmsNormFwdArgs& a, bool clusters, int device, cudaStream_t stream) {
  dispatch_dtypes<kMode>(a, [&]<typename Math>() {
    constexpr int kVec = kVectorPack<Math>;
    if (fwd_vectorizable<Math, kVec>(a)) {
      launch_fwd<Math, kVec>(a, clusters, device, stream);
    } else {
      launch_fwd<Math, 1>(a, clusters, device, stream);
    }
  });
}

template <CastingMode kMode>
void bwd_for_mode(const detail::RmsNormBwdArgs& a, bool clusters, int device, cudaStream_t stream) {
  dispatch_dtypes<kMode>(a, [&]<typename Math>() {
    constexpr int kVec = kVectorPack<Math>;
    if (bwd_vectorizable<Math, kVec>(a)) {
      launch_bwd<Math, kVec>(a, clusters, device, stream);
    } else {
      launch_bwd<Math, 1>(a, clusters, device, stream);
    }
  });
}

}  // namespace tigon::cuda::rms_norm
