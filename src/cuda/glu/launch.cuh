// Host side of the SwiGLU / GeGLU kernels for one activation: 16-byte packs when every pointer
// and row stride allows, one element per access otherwise; included by one .cu per activation.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/dispatch.h"
#include "cuda/common/launch.cuh"
#include "cuda/glu/entry.h"
#include "cuda/glu/kernels.cuh"
#include "ops/glu_args.h"

namespace tigon::cuda::glu {

inline bool vectorizable(std::size_t element_bytes, std::int64_t rows,
                         std::initializer_list<const void*> pointers,
                         std::initializer_list<std::int64_t> row_strides) {
  const std::int64_t p = static_cast<std::int64_t>(16 / element_bytes);
  for (const void* ptr : pointers) {
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) return false;
  }
  if (rows == 1) return true;
  for (std::int64_t s : row_strides) {
    if (s % p != 0) return false;
  }
  return true;
}

inline Tiling tiling_for(std::int64_t rows, std::int64_t width, int p) {
  const std::int64_t tile = static_cast<std::int64_t>(kThreads) * kPacks * p;
  Tiling t;
  t.tiles_per_row = (width + tile - 1) / tile;
  t.tiles = rows * t.tiles_per_row;
  return t;
}

// Multipliers of 1 take the plain op's kernels (the extra steps are exact there).
template <GluActivation kAct, typename T, int P>
void launch_fwd(const detail::GluFwdArgs& a, cudaStream_t stream) {
  const Tiling t = tiling_for(a.rows, a.width, P);
  const auto kernel =
      a.scaled() ? &glu_fwd_kernel<kAct, T, P, true> : &glu_fwd_kernel<kAct, T, P, false>;
  launch_kernel(kernel, std::min(t.tiles, kMaxGridBlocks), dim3(kThreads), 0, 1, stream, a, t);
}

// Multipliers of 1 take the plain op's kernels (the extra steps are exact there).
template <GluActivation kAct, typename T, int P>
void launch_bwd(const detail::GluBwdArgs& a, cudaStream_t stream) {
  const Tiling t = tiling_for(a.rows, a.width, P);
  const auto kernel =
      a.scaled() ? &glu_bwd_kernel<kAct, T, P, true> : &glu_bwd_kernel<kAct, T, P, false>;
  launch_kernel(kernel, std::min(t.tiles, kMaxGridBlocks), dim3(kThreads), 0, 1, stream, a, t);
}

template <GluActivation kAct>
void fwd_for_activation(const detail::GluFwdArgs& a, cudaStream_t stream) {
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kP = static_cast<int>(16 / sizeof(T));
    if (vectorizable(sizeof(T), a.rows, {a.a, a.b, a.y},
                     {a.a_row_stride, a.b_row_stride, a.y_row_stride})) {
      launch_fwd<kAct, T, kP>(a, stream);
    } else {
      launch_fwd<kAct, T, 1>(a, stream);
    }
  });
}

template <GluActivation kAct>
void bwd_for_activation(const detail::GluBwdArgs& a, cudaStream_t stream) {
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kP = static_cast<int>(16 / sizeof(T));
    if (vectorizable(
            sizeof(T), a.rows, {a.dy, a.a, a.b, a.da, a.db},
            {a.dy_row_stride, a.a_row_stride, a.b_row_stride, a.da_row_stride, a.db_row_stride})) {
      launch_bwd<kAct, T, kP>(a, stream);
    } else {
      launch_bwd<kAct, T, 1>(a, stream);
    }
  });
}

}  // namespace tigon::cuda::glu
