// SwiGLU / GeGLU kernels: elementwise over rows of `width` elements, each tensor with its own row
// stride. The per-element arithmetic is math::Glu (shared with the CPU backend), evaluated per
// pack by pack_ops.cuh (a faster, bitwise-equal gate for 16-bit types); these kernels move data. A
// block handles tiles of kPacks * blockDim.x packs of P elements of one row; a pack that would
// cross the row's end is done element by element. kScaled: gate / down multipliers other than 1
// (include/tigon/ops/glu.h), applied to the packs around the same pack ops; without them the
// kernels are those of the plain op.
#pragma once

#include <cstdint>

#include "cuda/common/vector_access.cuh"
#include "cuda/glu/pack_ops.cuh"
#include "math/glu.h"
#include "ops/glu_args.h"

namespace tigon::cuda::glu {

inline constexpr int kThreads = 256;
inline constexpr int kPacks = 2;  // packs per thread per tile: loads in flight before the math

struct Tiling {
  std::int64_t tiles_per_row = 0;
  std::int64_t tiles = 0;
};

// The tile's row and the first column of this thread's pack k.
struct TilePosition {
  std::int64_t row;
  std::int64_t col0;
};

template <int P>
__device__ __forceinline__ TilePosition tile_position(std::int64_t tile, std::int64_t rows,
                                                      std::int64_t tiles_per_row) {
  const std::int64_t row = rows == 1 ? 0 : tile / tiles_per_row;  // dense tensors: one row
  const std::int64_t tile_in_row = tile - row * tiles_per_row;
  return {row, (tile_in_row * kPacks * blockDim.x + threadIdx.x) * P};
}

template <GluActivation kAct, typename T, int P, bool kScaled>
__global__ void __launch_bounds__(kThreads)
    glu_fwd_kernel(const detail::GluFwdArgs p, const Tiling tiling) {
  using Math = math::Glu<kAct, T>;
  auto element = [&](float a, float b) {
    if constexpr (kScaled) {
      return Math::forward(a, b, p.gate_multiplier, p.down_multiplier);
    } else {
      return Math::forward(a, b);
    }
  };
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * P;  // between k and k + 1
  for (std::int64_t tile = blockIdx.x; tile < tiling.tiles; tile += gridDim.x) {
    const TilePosition pos = tile_position<P>(tile, p.rows, tiling.tiles_per_row);
    const T* a = static_cast<const T*>(p.a) + pos.row * p.a_row_stride;
    const T* b = static_cast<const T*>(p.b) + pos.row * p.b_row_stride;
    T* y = static_cast<T*>(p.y) + pos.row * p.y_row_stride;
    Pack<T, P> pa[kPacks], pb[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const std::int64_t col = pos.col0 + k * step;
      if (col + P <= p.width) {
        pa[k] = load_pack<T, P>(a + col);
        pb[k] = load_pack<T, P>(b + col);
      }
    }
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const std::int64_t col = pos.col0 + k * step;
      if (col + P <= p.width) {
        if constexpr (kFastGate<T> && P % 2 == 0) {
          PackWords<T, P> out;
          if constexpr (kScaled) scale_words<T, P>(pa[k].words, p.gate_multiplier);
          forward_pack<kAct, T, P>(pa[k], pb[k], out);
          if constexpr (kScaled) scale_words<T, P>(out, p.down_multiplier);
          store_words_global<T, P>(y + col, out);
        } else {
          T out[P];
#pragma unroll
          for (int i = 0; i < P; ++i) out[i] = element(pa[k].value(i), pb[k].value(i));
          store_pack_global<T, P>(y + col, out);
        }
      } else {
        for (std::int64_t j = col; j < p.width; ++j) {
          y[j] = element(math::to_float(a[j]), math::to_float(b[j]));
        }
      }
    }
  }
}

// Four blocks per SM (64 registers): bf16 would otherwise take 78 and fit three, too few loads
// in flight for the five streams the backward moves.
template <GluActivation kAct, typename T, int P, bool kScaled>
__global__ void __launch_bounds__(kThreads, 4)
    glu_bwd_kernel(const detail::GluBwdArgs p, const Tiling tiling) {
  using Math = math::Glu<kAct, T>;
  auto element = [&](float dy, float a, float b) {
    if constexpr (kScaled) {
      return Math::backward(dy, a, b, p.gate_multiplier, p.down_multiplier);
    } else {
      return Math::backward(dy, a, b);
    }
  };
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * P;
  for (std::int64_t tile = blockIdx.x; tile < tiling.tiles; tile += gridDim.x) {
    const TilePosition pos = tile_position<P>(tile, p.rows, tiling.tiles_per_row);
    const T* dy = static_cast<const T*>(p.dy) + pos.row * p.dy_row_stride;
    const T* a = static_cast<const T*>(p.a) + pos.row * p.a_row_stride;
    const T* b = static_cast<const T*>(p.b) + pos.row * p.b_row_stride;
    T* da = static_cast<T*>(p.da) + pos.row * p.da_row_stride;
    T* db = static_cast<T*>(p.db) + pos.row * p.db_row_stride;
    Pack<T, P> pdy[kPacks], pa[kPacks], pb[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const std::int64_t col = pos.col0 + k * step;
      if (col + P <= p.width) {
        pdy[k] = load_pack<T, P>(dy + col);
        pa[k] = load_pack<T, P>(a + col);
        pb[k] = load_pack<T, P>(b + col);
      }
    }
    // Every element is read before it is written, by the same thread: da may be a, db may be b.
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const std::int64_t col = pos.col0 + k * step;
      if (col + P <= p.width) {
        if constexpr (kFastGate<T> && P % 2 == 0) {
          PackWords<T, P> out_a, out_b;
          if constexpr (kScaled) {  // dc = round_T(dy * dm), z = round_T(a * gm)
            scale_words<T, P>(pdy[k].words, p.down_multiplier);
            scale_words<T, P>(pa[k].words, p.gate_multiplier);
          }
          backward_pack<kAct, T, P>(pdy[k], pa[k], pb[k], out_a, out_b);
          if constexpr (kScaled) scale_words<T, P>(out_a, p.gate_multiplier);  // da = dz * gm
          store_words_global<T, P>(da + col, out_a);
          store_words_global<T, P>(db + col, out_b);
        } else {
          T out_a[P], out_b[P];
#pragma unroll
          for (int i = 0; i < P; ++i) {
            const auto g = element(pdy[k].value(i), pa[k].value(i), pb[k].value(i));
            out_a[i] = g.da;
            out_b[i] = g.db;
          }
          // store_pack (4-byte stores for float): the st.global.v4 of store_pack_global makes
          // the float32 SwiGLU backward spill at 64 registers.
          store_pack<T, P>(da + col, out_a);
          store_pack<T, P>(db + col, out_b);
        }
      } else {
        for (std::int64_t j = col; j < p.width; ++j) {
          const auto g = element(math::to_float(dy[j]), math::to_float(a[j]), math::to_float(b[j]));
          da[j] = g.da;
          db[j] = g.db;
        }
      }
    }
  }
}

}  // namespace tigon::cuda::glu
