// The DyT kernels: each thread owns kChunkColumns consecutive columns of one column tile and walks
// the rows of its row group, kRowBatch rows' loads in flight at a time. The formulas are
// math/dyt.h's, so each element has the CPU backend's bits; the backward also keeps the thread's
// float32 dgamma / dbeta column sums over the group's rows (in row order) and its dalpha sum.
#pragma once

#include <cstdint>

#include "cuda/common/group_sums.cuh"
#include "cuda/common/row_chunk.cuh"
#include "cuda/dyt/config.h"
#include "math/dyt.h"

namespace tigon::cuda::dyt {

static_assert(kChunkColumns == kChunk, "a DyT thread owns one row_chunk.cuh chunk");

struct Params {
  const void* alpha = nullptr;
  DType alpha_dtype = DType::kFloat32;
  const void* gamma = nullptr;
  DType gamma_dtype = DType::kFloat32;
  const void* beta = nullptr;  // null: 0
  DType beta_dtype = DType::kFloat32;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  Grid grid;
};

struct FwdParams {
  Params p;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  void* y = nullptr;
  std::int64_t y_row_stride = 0;
};

struct BwdParams {
  Params p;
  const void* dy = nullptr;
  std::int64_t dy_row_stride = 0;
  const void* x = nullptr;
  std::int64_t x_row_stride = 0;
  void* dx = nullptr;  // may be dy
  std::int64_t dx_row_stride = 0;
  float* gamma_partials = nullptr;  // [groups][hidden]
  float* beta_partials = nullptr;   // [groups][hidden]; null without beta
  float* alpha_partials = nullptr;  // [groups * tiles]
};

// This CTA's column chunk and row range.
struct Work {
  std::int64_t col;
  std::int64_t group;
  std::int64_t tile;
  std::int64_t begin;
  std::int64_t end;
};

__device__ __forceinline__ Work work_of(const Params& p) {
  Work w;
  w.tile = static_cast<std::int64_t>(blockIdx.x) % p.grid.tiles;
  w.group = static_cast<std::int64_t>(blockIdx.x) / p.grid.tiles;
  w.col = w.tile * kTileColumns + static_cast<std::int64_t>(threadIdx.x) * kChunkColumns;
  w.begin = w.group * p.grid.group_rows;
  w.end = w.begin + p.grid.group_rows < p.rows ? w.begin + p.grid.group_rows : p.rows;
  return w;
}

__device__ __forceinline__ void load_params(const void* p, DType dtype, std::int64_t col,
                                            std::int64_t hidden, float (&out)[kChunkColumns]) {
#pragma unroll
  for (int i = 0; i < kChunkColumns; ++i) {
    out[i] = p != nullptr && col + i < hidden ? load_param(p, dtype, col + i) : 0.0f;
  }
}

template <typename X, bool kVector>
__global__ void __launch_bounds__(kThreads) dyt_fwd_kernel(FwdParams a) {
  using Math = math::DyT<X>;
  const Params& p = a.p;
  const Work w = work_of(p);
  if (w.col >= p.hidden) return;
  const float alpha = load_param(p.alpha, p.alpha_dtype, 0);
  float gamma[kChunkColumns], beta[kChunkColumns];
  load_params(p.gamma, p.gamma_dtype, w.col, p.hidden, gamma);
  load_params(p.beta, p.beta_dtype, w.col, p.hidden, beta);
  const auto* x = static_cast<const X*>(a.x);
  auto* y = static_cast<X*>(a.y);
  for (std::int64_t row0 = w.begin; row0 < w.end; row0 += kRowBatch) {
    Pack<X, kChunkColumns> xv[kRowBatch];
#pragma unroll
    for (int r = 0; r < kRowBatch; ++r) {
      if (row0 + r < w.end) {
        xv[r] = load_chunk_raw<X, kVector>(x + (row0 + r) * a.x_row_stride, w.col, p.hidden);
      }
    }
#pragma unroll
    for (int r = 0; r < kRowBatch; ++r) {
      if (row0 + r >= w.end) break;
      X out[kChunkColumns];
#pragma unroll
      for (int i = 0; i < kChunkColumns; ++i) {
        out[i] = Math::output(Math::activation(alpha, xv[r].value(i)), gamma[i], beta[i]);
      }
      store_chunk<X, kVector>(y + (row0 + r) * a.y_row_stride, w.col, p.hidden, out);
    }
  }
}

template <typename X, bool kVector>
__global__ void __launch_bounds__(kThreads) dyt_bwd_kernel(BwdParams a) {
  using Math = math::DyT<X>;
  __shared__ float scratch[kThreads / kWarpSize];
  const Params& p = a.p;
  const Work w = work_of(p);
  float dgamma[kChunkColumns] = {}, dbeta[kChunkColumns] = {};
  float dalpha = 0.0f;
  if (w.col < p.hidden) {
    const float alpha = load_param(p.alpha, p.alpha_dtype, 0);
    float gamma[kChunkColumns];
    load_params(p.gamma, p.gamma_dtype, w.col, p.hidden, gamma);
    const auto* dy = static_cast<const X*>(a.dy);
    const auto* x = static_cast<const X*>(a.x);
    auto* dx = static_cast<X*>(a.dx);
    for (std::int64_t row0 = w.begin; row0 < w.end; row0 += kRowBatch) {
      // Raw packs: in 16 bits half the registers of floats for the rows in flight.
      Pack<X, kChunkColumns> dyv[kRowBatch], xv[kRowBatch];
#pragma unroll
      for (int r = 0; r < kRowBatch; ++r) {
        if (row0 + r < w.end) {
          dyv[r] = load_chunk_raw<X, kVector>(dy + (row0 + r) * a.dy_row_stride, w.col, p.hidden);
          xv[r] = load_chunk_raw<X, kVector>(x + (row0 + r) * a.x_row_stride, w.col, p.hidden);
        }
      }
#pragma unroll
      for (int r = 0; r < kRowBatch; ++r) {
        if (row0 + r >= w.end) break;
        X out[kChunkColumns];
#pragma unroll
        for (int i = 0; i < kChunkColumns; ++i) {
          const float g = dyv[r].value(i);
          const float xi = xv[r].value(i);
          const float t = Math::activation(alpha, xi);
          const float u = Math::grad_pre(t, g, gamma[i]);
          out[i] = Math::grad_input(alpha, u);
          if (kVector || in_row(w.col, i, p.hidden)) {
            dgamma[i] += Math::grad_gamma_term(g, t);
            dbeta[i] += g;
            dalpha += Math::grad_alpha_term(xi, u);
          }
        }
        store_chunk<X, kVector>(dx + (row0 + r) * a.dx_row_stride, w.col, p.hidden, out);
      }
    }
    float* gp = a.gamma_partials + w.group * p.hidden;
    float* bp = a.beta_partials ? a.beta_partials + w.group * p.hidden : nullptr;
#pragma unroll
    for (int i = 0; i < kChunkColumns; ++i) {
      if (in_row(w.col, i, p.hidden)) {
        gp[w.col + i] = dgamma[i];
        if (bp) bp[w.col + i] = dbeta[i];
      }
    }
  }
  float sum[1] = {dalpha};
  row_group_sums<1>(sum, kThreads, scratch);
  if (threadIdx.x == 0) a.alpha_partials[w.group * p.grid.tiles + w.tile] = sum[0];
}

}  // namespace tigon::cuda::dyt
