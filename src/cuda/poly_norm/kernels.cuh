// The PolyNorm kernels: row_split's threads share a row (several rows a CTA for short rows). Each
// thread adds its chunks' terms in chunk order, the row's threads' sums meet in row_group_sums's
// fixed order, then each thread writes its chunks from registers (resident) or from a second
// read. The formulas are math/poly_norm.h's (the CPU backend's); only the sums' order differs.
#pragma once

#include <cstdint>

#include "cuda/common/group_sums.cuh"
#include "cuda/common/row_chunk.cuh"
#include "cuda/poly_norm/config.h"
#include "math/poly_norm.h"

namespace tigon::cuda::poly_norm {

static_assert(kChunkColumns == kChunk, "a PolyNorm chunk is one row_chunk.cuh chunk");

struct Params {
  const void* weight = nullptr;
  DType weight_dtype = DType::kFloat32;
  const void* bias = nullptr;
  DType bias_dtype = DType::kFloat32;
  float eps = 0.0f;
  std::int64_t rows = 0;
  std::int64_t hidden = 0;
  RowSplit split;
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
  float* row_partials = nullptr;  // [rows][4]: r3 * S3, r2 * S2, r1 * S1, sum(dy)
};

inline constexpr int kRowPartials = 4;

// Where this thread sits: its row slot in the CTA and its lane in the row.
struct Slot {
  int slot;
  int lane;
  int rows_per_block;
};

__device__ __forceinline__ Slot slot_of(const RowSplit& s) {
  const int t = static_cast<int>(threadIdx.x);
  return {t / s.row_threads, t % s.row_threads, static_cast<int>(blockDim.x) / s.row_threads};
}

// The chunks a thread visits: kResidentChunks (a compile-time count) when resident, else all of
// the longest thread's.
template <bool kResident>
__device__ __forceinline__ std::int64_t visits(const RowSplit& s) {
  return kResident ? kResidentChunks : s.thread_chunks();
}

template <typename X, bool kVector, bool kResident>
__global__ void __launch_bounds__(kMaxRowThreads) poly_norm_fwd_kernel(FwdParams a) {
  using Math = math::PolyNorm<X>;
  __shared__ float scratch[3 * kMaxRowThreads / kWarpSize];
  const Params& p = a.p;
  const Slot s = slot_of(p.split);
  float w[3];
  for (int k = 0; k < 3; ++k) w[k] = load_param(p.weight, p.weight_dtype, k);
  const float b = load_param(p.bias, p.bias_dtype, 0);
  const std::int64_t row_blocks = (p.rows + s.rows_per_block - 1) / s.rows_per_block;
  const std::int64_t n = visits<kResident>(p.split);
  const auto* x = static_cast<const X*>(a.x);
  auto* y = static_cast<X*>(a.y);
  for (std::int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
    const std::int64_t row = rb * s.rows_per_block + s.slot;
    const bool valid = row < p.rows;
    const X* xr = x + (valid ? row : 0) * a.x_row_stride;
    // The row's chunks as raw packs (16-bit: half the registers of floats).
    Pack<X, kChunkColumns> held[kResident ? kResidentChunks : 1];
    float sums[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t col = (s.lane + k * p.split.row_threads) * kChunkColumns;
      if (!valid || col >= p.hidden) continue;
      const Pack<X, kChunkColumns> v = load_chunk_raw<X, kVector>(xr, col, p.hidden);
      if constexpr (kResident) held[k] = v;
#pragma unroll
      for (int i = 0; i < kChunkColumns; ++i) {
        const auto pw = Math::powers(v.value(i));
        sums[0] += Math::square(pw.p1);
        sums[1] += Math::square(pw.p2);
        sums[2] += Math::square(pw.p3);
      }
    }
    row_group_sums<3>(sums, p.split.row_threads, scratch);
    if (!valid) continue;
    float r[3];
    for (int k = 0; k < 3; ++k) r[k] = Math::rstd(sums[k], p.hidden, p.eps);
    X* yr = y + row * a.y_row_stride;
#pragma unroll
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t col = (s.lane + k * p.split.row_threads) * kChunkColumns;
      if (col >= p.hidden) continue;
      Pack<X, kChunkColumns> v;
      if constexpr (kResident) {
        v = held[k];
      } else {
        v = load_chunk_raw<X, kVector>(xr, col, p.hidden);
      }
      X out[kChunkColumns];
#pragma unroll
      for (int i = 0; i < kChunkColumns; ++i) {
        out[i] = Math::output(Math::powers(v.value(i)), w, r, b);
      }
      store_chunk<X, kVector>(yr, col, p.hidden, out);
    }
  }
}

template <typename X, bool kVector, bool kResident>
__global__ void __launch_bounds__(kMaxRowThreads) poly_norm_bwd_kernel(BwdParams a) {
  using Math = math::PolyNorm<X>;
  __shared__ float scratch[7 * kMaxRowThreads / kWarpSize];
  const Params& p = a.p;
  const Slot s = slot_of(p.split);
  float w[3];
  for (int k = 0; k < 3; ++k) w[k] = load_param(p.weight, p.weight_dtype, k);
  const std::int64_t row_blocks = (p.rows + s.rows_per_block - 1) / s.rows_per_block;
  const std::int64_t n = visits<kResident>(p.split);
  const auto* x = static_cast<const X*>(a.x);
  const auto* dy = static_cast<const X*>(a.dy);
  auto* dx = static_cast<X*>(a.dx);
  for (std::int64_t rb = blockIdx.x; rb < row_blocks; rb += gridDim.x) {
    const std::int64_t row = rb * s.rows_per_block + s.slot;
    const bool valid = row < p.rows;
    const X* xr = x + (valid ? row : 0) * a.x_row_stride;
    const X* dyr = dy + (valid ? row : 0) * a.dy_row_stride;
    // The row's chunks as raw packs (16-bit: half the registers of floats).
    Pack<X, kChunkColumns> held_x[kResident ? kResidentChunks : 1];
    Pack<X, kChunkColumns> held_dy[kResident ? kResidentChunks : 1];
    // Squares of p1, p2, p3; S1, S2, S3 (dy * p_k); sum(dy).
    float sums[7] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t col = (s.lane + k * p.split.row_threads) * kChunkColumns;
      if (!valid || col >= p.hidden) continue;
      const Pack<X, kChunkColumns> xp = load_chunk_raw<X, kVector>(xr, col, p.hidden);
      const Pack<X, kChunkColumns> gp = load_chunk_raw<X, kVector>(dyr, col, p.hidden);
      if constexpr (kResident) {
        held_x[k] = xp;
        held_dy[k] = gp;
      }
      float g[kChunkColumns];
#pragma unroll
      for (int i = 0; i < kChunkColumns; ++i) g[i] = gp.value(i);
#pragma unroll
      for (int i = 0; i < kChunkColumns; ++i) {
        const auto pw = Math::powers(xp.value(i));
        sums[0] += Math::square(pw.p1);
        sums[1] += Math::square(pw.p2);
        sums[2] += Math::square(pw.p3);
        sums[3] += g[i] * pw.p1;
        sums[4] += g[i] * pw.p2;
        sums[5] += g[i] * pw.p3;
        sums[6] += g[i];
      }
    }
    row_group_sums<7>(sums, p.split.row_threads, scratch);
    if (!valid) continue;
    float r[3], c[3];
    for (int k = 0; k < 3; ++k) {
      r[k] = Math::rstd(sums[k], p.hidden, p.eps);
      c[k] = Math::grad_coefficient(r[k], sums[3 + k], p.hidden);
    }
    if (s.lane == 0) {
      float* out = a.row_partials + row * kRowPartials;
      out[0] = r[2] * sums[5];
      out[1] = r[1] * sums[4];
      out[2] = r[0] * sums[3];
      out[3] = sums[6];
    }
    X* dxr = dx + row * a.dx_row_stride;
#pragma unroll
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t col = (s.lane + k * p.split.row_threads) * kChunkColumns;
      if (col >= p.hidden) continue;
      Pack<X, kChunkColumns> xp, gp;
      if constexpr (kResident) {
        xp = held_x[k];
        gp = held_dy[k];
      } else {
        xp = load_chunk_raw<X, kVector>(xr, col, p.hidden);
        gp = load_chunk_raw<X, kVector>(dyr, col, p.hidden);
      }
      X out[kChunkColumns];
#pragma unroll
      for (int i = 0; i < kChunkColumns; ++i) {
        const float xi = xp.value(i);
        out[i] = Math::grad_input(xi, gp.value(i), Math::powers(xi), w, r, c);
      }
      store_chunk<X, kVector>(dxr, col, p.hidden, out);
    }
  }
}

}  // namespace tigon::cuda::poly_norm
