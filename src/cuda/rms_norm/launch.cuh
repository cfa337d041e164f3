// Host side of the RMSNorm kernels for one casting mode: picks the vector width (16-byte packs when
// every pointer and row stride allows, else scalar), the row split, and launches. Included by one
// .cu per casting mode (rms_norm_<mode>.cu), so the kernels compile in parallel and each kernel is
// instantiated in exactly one translation unit.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/common/pack_fit.h"
#include "cuda/common/vector_access.cuh"
#include "cuda/rms_norm/bwd_kernels.cuh"
#include "cuda/rms_norm/fwd_kernels.cuh"
#include "cuda/rms_norm/layout.cuh"
#include "cuda/rms_norm/modes.h"
#include "math/rms_norm.h"
#include "ops/rms_norm_args.h"
#include "tigon/error.h"

namespace tigon::cuda::rms_norm {

template <typename Math, int P, bool kResidual>
bool fwd_vectorizable(const detail::RmsNormFwdArgs& a) {
  using T = MathTraits<Math>;
  constexpr std::size_t kX = kPackAlignment<typename T::X, P>;
  return strides_fit(a.rows, a.hidden, P, {a.x_row_stride, a.y_row_stride}) && aligned(a.x, kX) &&
         aligned(a.y, kPackAlignment<typename T::Y, P>) &&
         (!T::kAffine || aligned(a.weight, kPackAlignment<typename T::W, P>)) &&
         (!kResidual ||
          (strides_fit(a.rows, a.hidden, P, {a.residual_row_stride, a.h_row_stride}) &&
           aligned(a.residual, kX) && aligned(a.h, kX)));
}

template <typename Math, int P, bool kResidual>
bool bwd_vectorizable(const detail::RmsNormBwdArgs& a) {
  using T = MathTraits<Math>;
  return strides_fit(a.rows, a.hidden, P, {a.dy_row_stride, a.x_row_stride, a.dx_row_stride}) &&
         aligned(a.dy, kPackAlignment<typename T::Y, P>) &&
         aligned(a.x, kPackAlignment<typename T::X, P>) &&
         aligned(a.dx, kPackAlignment<typename T::X, P>) &&
         (!T::kAffine || (aligned(a.weight, kPackAlignment<typename T::W, P>) &&
                          aligned(a.workspace, kPackAlignment<float, P>))) &&
         (!kResidual || (strides_fit(a.rows, a.hidden, P, {a.dh_row_stride}) &&
                         aligned(a.dh, kPackAlignment<typename T::X, P>)));
}

// A row kernel over a split into slices: as a cluster of them, or without clusters (`sums`: the
// slice sums' workspace) as the same CTAs launched twice, kPublish then kGather (SlicePass).
template <typename Params>
void launch_slices(void (*kernel)(Params), std::int64_t grid, std::size_t smem, Params p,
                   float* sums, cudaStream_t stream) {
  if (sums == nullptr || p.split.slices == 1) {
    launch_kernel(kernel, grid, dim3(p.split.block_threads), smem, p.split.slices, stream, p);
    return;
  }
  p.slice_sums.sums = sums;
  for (const SlicePass pass : {SlicePass::kPublish, SlicePass::kGather}) {
    p.slice_sums.pass = pass;
    launch_kernel(kernel, grid, dim3(p.split.block_threads), smem, 1, stream, p);
  }
}

// One CTA (or cluster) per block of rows; kernels loop if the grid had to be capped.
template <typename Params>
void launch_fwd_rows(void (*kernel)(Params), const Params& p, float* sums, cudaStream_t stream) {
  const std::int64_t units = ceil_div(p.rows, rows_per_block(p.split));
  const std::int64_t grid = std::min(units, kMaxGridBlocks / p.split.slices) * p.split.slices;
  launch_slices(kernel, grid, 0, p, sums, stream);
}

// kResidual: fused_add_rms_norm's kernels (h = x + residual normalized and stored).
template <typename Math, int P, bool kResidual>
void launch_fwd(const detail::RmsNormFwdArgs& a, const FwdConfig& c, cudaStream_t stream) {
  FwdParamsOf<kResidual> p;
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
  p.split = c.split;
  p.fold_half = c.fold_half;
  if constexpr (kResidual) {
    p.residual = a.residual;
    p.residual_row_stride = a.residual_row_stride;
    p.h = a.h;
    p.h_row_stride = a.h_row_stride;
  }
  float* sums = c.slice_sums ? static_cast<float*>(a.workspace) : nullptr;
  switch (c.kernel) {
    case FwdKernel::kTwoPass:
      launch_kernel(c.two_pass_unroll == 2 ? rms_norm_fwd_two_pass_kernel<Math, P, 2, kResidual>
                                           : rms_norm_fwd_two_pass_kernel<Math, P, 4, kResidual>,
                    std::min(a.rows, kMaxGridBlocks), dim3(kTwoPassThreads), 0, 1, stream, p);
      return;
    case FwdKernel::kLightRows:
      // fwd_config returns it for 16-bit x on the 16-byte path only.
      if constexpr (P > 1 && sizeof(typename MathTraits<Math>::X) == 2) {
        launch_fwd_rows(rms_norm_fwd_kernel<Math, P, kLightPacksPerThread, false, kResidual>, p,
                        sums, stream);
        return;
      }
      break;
    case FwdKernel::kRows:
      launch_fwd_rows(p.split.slices > 1
                          ? rms_norm_fwd_kernel<Math, P, kFwdPacksPerThread, true, kResidual>
                          : rms_norm_fwd_kernel<Math, P, kFwdPacksPerThread, false, kResidual>,
                      p, sums, stream);
      return;
  }
  throw Error(ErrorCode::kInvalidArgument, "tigon::rms_norm (CUDA): no kernel for this config");
}

// dx and the dW partial rows; the caller then launches the finishing kernel (dw_finish.cuh).
// kResidual: fused_add_rms_norm's kernels (dx = dh + the norm's dx).
template <typename Math, int P, bool kResidual>
void launch_bwd(const detail::RmsNormBwdArgs& a, const BwdConfig& c, cudaStream_t stream) {
  using T = MathTraits<Math>;
  BwdParamsOf<kResidual> p;
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
  p.groups = c.groups;
  p.split = c.split;
  p.prefetch = c.prefetch;
  if constexpr (kResidual) {
    p.dh = a.dh;
    p.dh_row_stride = a.dh_row_stride;
  }
  // One CTA (or cluster) per dW group: which rows a group sums never depends on the grid.
  if (p.split.two_pass) {
    launch_kernel(rms_norm_bwd_two_pass_kernel<Math, P, kResidual>, p.groups.groups,
                  dim3(kTwoPassThreads), 0, 1, stream, p);
    return;
  }
  // Several rows a block: their dW accumulators meet in one shared row slice (bwd_kernels.cuh).
  // The slice sums follow the dW partials in the workspace.
  float* sums = c.slice_sums
                    ? static_cast<float*>(a.workspace) +
                          dw_partial_floats(a.rows, a.hidden, sizeof(typename T::X), T::kAffine)
                    : nullptr;
  launch_slices(p.split.slices > 1 ? rms_norm_bwd_kernel<Math, P, true, kResidual>
                                   : rms_norm_bwd_kernel<Math, P, false, kResidual>,
                p.groups.groups * p.split.slices, sizeof(float) * dw_slot_floats<Math, P>(p.split),
                p, sums, stream);
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

// Runs the forward for the arguments' dtypes in casting mode kMode with the config fwd_config
// returns for them on a device of traits `d`, or with `forced` (tests: every config fwd_config
// can return for a shape must give the same bits). kResidual: fused_add_rms_norm.
template <CastingMode kMode, bool kResidual>
void fwd_for_mode(const detail::RmsNormFwdArgs& a, DeviceTraits d, const FwdConfig* forced,
                  cudaStream_t stream) {
  dispatch_dtypes<kMode>(a, [&]<typename Math>() {
    constexpr int kVec = kVectorPack<Math>;
    constexpr int kXSize = static_cast<int>(sizeof(typename MathTraits<Math>::X));
    const auto run = [&]<int P>() {
      launch_fwd<Math, P, kResidual>(a, forced ? *forced : fwd_config(a.hidden, P, kXSize, d),
                                     stream);
    };
    if (fwd_vectorizable<Math, kVec, kResidual>(a)) {
      run.template operator()<kVec>();
    } else {
      run.template operator()<1>();
    }
  });
}

template <CastingMode kMode, bool kResidual>
void bwd_for_mode(const detail::RmsNormBwdArgs& a, DeviceTraits d, cudaStream_t stream) {
  dispatch_dtypes<kMode>(a, [&]<typename Math>() {
    constexpr int kVec = kVectorPack<Math>;
    constexpr int kXSize = static_cast<int>(sizeof(typename MathTraits<Math>::X));
    const auto run = [&]<int P>() {
      launch_bwd<Math, P, kResidual>(a, bwd_config(a.rows, a.hidden, P, kXSize, d), stream);
    };
    if (bwd_vectorizable<Math, kVec, kResidual>(a)) {
      run.template operator()<kVec>();
    } else {
      run.template operator()<1>();
    }
  });
}

}  // namespace tigon::cuda::rms_norm
