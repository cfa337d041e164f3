// Fused linear cross-entropy CPU backend: the three matrix products of each chunk through a BLAS
// (sgemm, float32 accumulation; cmake/blas.cmake) around the CPU cross-entropy rows, with the same
// accumulation semantics as the CUDA backend (dweight accumulated in float32 or in its own dtype,
// one rounding per chunk; the float32 accumulation of a 16-bit dweight in place,
// fused_linear_cross_entropy_dweight.h). 16-bit operands are converted to float32 (exactly) in
// vocabulary blocks of about kBlockBytes and multiplied in float32; the results are rounded at the
// header's points. Without a BLAS (or for sizes over its 32-bit integers) the products are plain
// parallel loops.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "cpu/gemm.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "ops/fused_linear_cross_entropy_args.h"

namespace tigon::cpu {
namespace {

using detail::FlceArgs;
using math::from_float;
using math::to_float;

// How the chunk products run: through the BLAS when there is one and its 32-bit integers hold
// every size, with 16-bit operands converted to float32 in vocabulary blocks.
struct Plan {
  bool blas = false;
  bool narrow = false;     // 16-bit operands: float32 copies of x_c, weight and dL blocks
  bool copy_x = false;     // x_c copied to a contiguous float32 [chunk, H]
  std::int64_t block = 0;  // vocabulary rows per block (narrow)
  std::size_t scratch_floats(const FlceArgs& a) const {
    if (!blas) return 0;
    const auto r = static_cast<std::size_t>(a.chunk_rows),
               h = static_cast<std::size_t>(a.hidden_size);
    const auto b = static_cast<std::size_t>(block);
    return (copy_x ? r * h : 0) + (narrow ? r * h + b * h + r * b : 0);
  }
};

#if defined(TIGON_WITH_BLAS)
// The float32 weight block converted at a time (512 rows at H = 4096): dx_c accumulates over the
// blocks, so small ones re-read it often (1 MiB blocks cost the bf16 path 30% at 512 x 4096 x
// 2048 on one thread; 8 MiB ones are within 7% of the float32 path).
constexpr std::int64_t kBlockBytes = std::int64_t{8} << 20;
#endif

Plan plan(const FlceArgs& a) {
  Plan p;
#if defined(TIGON_WITH_BLAS)
  const std::int64_t v = a.ce.vocab, h = a.hidden_size, kMax = INT_MAX;
  p.blas = v >= 1 && h >= 1 && v <= kMax && h <= kMax && a.chunk_rows <= kMax &&
           a.hidden_row_stride <= kMax;
  p.narrow = a.dtype != DType::kFloat32;
  p.copy_x = p.narrow || a.hidden_row_stride < h;
  p.block = p.narrow ? std::min(v, std::max<std::int64_t>(64, kBlockBytes / (4 * h) / 64 * 64)) : v;
#else
  (void)a;
#endif
  return p;
}

struct Workspace {
  void* logits;          // [chunk, V] in the activations' dtype
  detail::RowTerms row;  // [N] each
  float* dbias;          // [V] float32 accumulator
  float* dweight;        // rows [0, R) of a 16-bit dweight accumulated in float32 (dweight_fp32)
  float* scratch;        // Plan::scratch_floats
};

std::size_t align(std::size_t b) { return (b + 63) / 64 * 64; }

std::size_t dweight_floats(const FlceArgs& a) {
  return a.dweight_fp32 ? detail::dweight_split(a.ce.vocab, a.hidden_size).low_floats() : 0;
}

Workspace carve(const FlceArgs& a) {
  auto* p = static_cast<unsigned char*>(a.workspace);
  Workspace w{};
  w.logits = p;
  p += align(static_cast<std::size_t>(a.chunk_rows * a.ce.vocab) * element_size(a.dtype));
  const auto take_rows = [&] {
    auto* terms = reinterpret_cast<float*>(p);
    p += align(sizeof(float) * a.ce.rows);
    return terms;
  };
  w.row.ce = take_rows();
  w.row.z = take_rows();
  w.row.hit = take_rows();
  w.dbias = reinterpret_cast<float*>(p);
  p += align(sizeof(float) * a.ce.vocab);
  w.dweight = reinterpret_cast<float*>(p);
  p += align(sizeof(float) * dweight_floats(a));
  w.scratch = reinterpret_cast<float*>(p);
  return w;
}

float bias_at(const FlceArgs& a, std::int64_t v) {
  return detail::dispatch_dtype(a.bias_dtype, [&](auto tag) {
    return to_float(static_cast<const typename decltype(tag)::type*>(a.bias)[v]);
  });
}

// Steps after the chunk loop, shared by both paths: dW of an empty batch, the in-place narrowing
// of a float32-accumulated 16-bit dW, dbias, the loss.
void finish(const FlceArgs& a, const Workspace& ws, const detail::CeScales& scales,
            const detail::DweightSplit& split) {
  const std::int64_t n = a.ce.rows, v = a.ce.vocab, h = a.hidden_size;
  if (a.needs_grad() && n == 0) {
    if (a.grad_weight) std::memset(a.grad_weight, 0, element_size(a.grad_weight_dtype) * v * h);
  } else if (a.dweight_fp32) {
    finish_dweight(split, ws.dweight, a.grad_weight, a.grad_weight_dtype,
                   detail::kNarrowingTopBlock);
  }
  if (a.grad_bias) {
    detail::dispatch_dtype(a.grad_bias_dtype, [&](auto tag) {
      using G = typename decltype(tag)::type;
      for (std::int64_t j = 0; j < v; ++j)
        static_cast<G*>(a.grad_bias)[j] = from_float<G>(ws.dbias[j]);
    });
  }
  if (a.ce.loss) cross_entropy_finish(a.ce, scales, ws.row);  // not in a backward
}

void add_dbias(const FlceArgs& a, const Workspace& ws, const void* dl_chunk, std::int64_t rows) {
  if (!a.grad_bias) return;
  const std::int64_t v = a.ce.vocab;
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* dl = static_cast<const T*>(dl_chunk);
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < v; ++j) ws.dbias[j] += to_float(dl[i * v + j]);
  });
}

// What both paths start from: the workspace, the reduction's scales, the dW split; dbias zeroed.
struct Start {
  Workspace ws;
  detail::CeScales scales;
  detail::DweightSplit split;
};

Start start(const FlceArgs& a) {
  Start s{carve(a), cross_entropy_scales(a.ce), detail::dweight_split(a.ce.vocab, a.hidden_size)};
  if (a.grad_bias) std::fill(s.ws.dbias, s.ws.dbias + a.ce.vocab, 0.0f);
  return s;
}

// The plain loops (no BLAS).
template <typename T>
void run(const FlceArgs& a) {
  const std::int64_t n = a.ce.rows, v = a.ce.vocab, h = a.hidden_size;
  const auto* x = static_cast<const T*>(a.hidden);
  const auto* w = static_cast<const T*>(a.weight);
  const Start st = start(a);
  const Workspace& ws = st.ws;
  const detail::DweightSplit& split = st.split;
  auto* logits = static_cast<T*>(ws.logits);

  for (std::int64_t r0 = 0; r0 < n; r0 += a.chunk_rows) {
    const std::int64_t rows = std::min(a.chunk_rows, n - r0);
    // logits = round_T(x_c @ w^T) (+ bias, float32, then rounded when stored).
    parallel_for(rows, v * h, [&](std::int64_t i) {
      const T* xr = x + (r0 + i) * a.hidden_row_stride;
      for (std::int64_t j = 0; j < v; ++j) {
        float dot =
            lane_sum(h, [&](std::int64_t k) { return to_float(xr[k]) * to_float(w[j * h + k]); });
        dot = math::round_to<T>(dot);
        if (a.bias) dot += bias_at(a, j);
        logits[i * v + j] = from_float<T>(dot);
      }
    });
    const detail::CrossEntropyArgs c = detail::chunk_args(a, r0, rows, logits);
    cross_entropy_rows(c, st.scales, ws.row.offset(r0));
    if (!a.needs_grad()) continue;
    const T* dl = logits;
    if (a.grad_hidden) {  // dx_c = round_T(dL @ w)
      auto* dx = static_cast<T*>(a.grad_hidden);
      parallel_for(rows, v * h, [&](std::int64_t i) {
        std::vector<float> acc(h, 0.0f);
        for (std::int64_t j = 0; j < v; ++j) {
          const float g = to_float(dl[i * v + j]);
          for (std::int64_t k = 0; k < h; ++k) acc[k] += g * to_float(w[j * h + k]);
        }
        for (std::int64_t k = 0; k < h; ++k) dx[(r0 + i) * h + k] = from_float<T>(acc[k]);
      });
    }
    if (a.grad_weight) {  // dw += dL^T @ x_c, one rounding to the accumulator's dtype per chunk
      // dweight_fp32: row j's float32 accumulator is in the workspace (j < R) or in the
      // gradient's storage (row j - R of it read as floats).
      detail::dispatch_dtype(a.dweight_fp32 ? DType::kFloat32 : a.grad_weight_dtype, [&](auto tag) {
        using G = typename decltype(tag)::type;
        parallel_for(v, rows * h, [&](std::int64_t j) {
          std::vector<float> acc(h, 0.0f);
          for (std::int64_t i = 0; i < rows; ++i) {
            const float g = to_float(dl[i * v + j]);
            const T* xr = x + (r0 + i) * a.hidden_row_stride;
            for (std::int64_t k = 0; k < h; ++k) acc[k] += g * to_float(xr[k]);
          }
          auto* f32 = static_cast<float*>(a.grad_weight);
          G* dw = !a.dweight_fp32      ? static_cast<G*>(a.grad_weight) + j * h
                  : j < split.low_rows ? reinterpret_cast<G*>(ws.dweight + j * h)
                                       : reinterpret_cast<G*>(f32 + (j - split.low_rows) * h);
          for (std::int64_t k = 0; k < h; ++k) {
            const float prev = r0 == 0 ? 0.0f : to_float(dw[k]);
            dw[k] = from_float<G>(prev + acc[k]);
          }
        });
      });
    }
    add_dbias(a, ws, dl, rows);
  }
  finish(a, ws, st.scales, split);
}

#if defined(TIGON_WITH_BLAS)
// The vocabulary blocks [start, end) of a 16-bit product: of at most `block` rows and never across
// row R of the dweight split (so that the two dW products of fused_linear_cross_entropy_args.h are
// whole blocks); a function of V, H and the dtype only, so no bit depends on which gradients are
// asked.
std::vector<std::pair<std::int64_t, std::int64_t>> vocab_blocks(std::int64_t v, std::int64_t r,
                                                                std::int64_t block) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& [lo, hi] : {std::pair{std::int64_t{0}, r}, std::pair{r, v}})
    for (std::int64_t j = lo; j < hi; j += block) out.emplace_back(j, std::min(hi, j + block));
  return out;
}

template <typename T>
void run_blas(const FlceArgs& a, const Plan& pl) {
  constexpr bool kNarrow = !std::is_same_v<T, float>;
  const std::int64_t n = a.ce.rows, v = a.ce.vocab, h = a.hidden_size;
  const std::int64_t stride = a.hidden_row_stride, chunk = a.chunk_rows;
  const auto* x = static_cast<const T*>(a.hidden);
  const auto* w = static_cast<const T*>(a.weight);
  const Start st = start(a);
  const Workspace& ws = st.ws;
  const detail::DweightSplit& split = st.split;
  auto* logits = static_cast<T*>(ws.logits);
  // Scratch (Plan::scratch_floats): xf [chunk, H] (copy_x); dxf [chunk, H], wf [block, H] and
  // lf [chunk, block] (narrow).
  float* xf = ws.scratch;
  float* dxf = xf + (pl.copy_x ? chunk * h : 0);
  float* wf = dxf + chunk * h;
  float* lf = wf + pl.block * h;
  const auto blocks = vocab_blocks(v, kNarrow ? split.low_rows : v, pl.block);
  std::int64_t wf_holds = -1;  // the block start whose weight rows wf holds, -1: none
  const auto weight_block = [&](std::int64_t j0, std::int64_t j1) {
    if (wf_holds == j0) return;
    parallel_for(j1 - j0, h, [&](std::int64_t j) {
      for (std::int64_t k = 0; k < h; ++k) wf[j * h + k] = to_float(w[(j0 + j) * h + k]);
    });
    wf_holds = j0;
  };
  // The float32 accumulator of dW rows [j0, ...) (a float32 dW, or dweight_fp32's split).
  const auto dw_f32 = [&](std::int64_t j0) {
    auto* f32 = static_cast<float*>(a.grad_weight);
    if (!a.dweight_fp32) return f32 + j0 * h;
    return j0 < split.low_rows ? ws.dweight + j0 * h : f32 + (j0 - split.low_rows) * h;
  };
  const bool f32_dw = a.grad_weight_dtype == DType::kFloat32 || a.dweight_fp32;

  for (std::int64_t r0 = 0; r0 < n; r0 += chunk) {
    const std::int64_t rows = std::min(chunk, n - r0);
    const float* xc = nullptr;
    std::int64_t ldx = h;
    if (pl.copy_x) {
      parallel_for(rows, h, [&](std::int64_t i) {
        const T* xr = x + (r0 + i) * stride;
        for (std::int64_t k = 0; k < h; ++k) xf[i * h + k] = to_float(xr[k]);
      });
      xc = xf;
    } else if constexpr (!kNarrow) {
      xc = x + r0 * stride;
      ldx = stride;
    }
    // logits = round_T(x_c @ w^T) (+ bias, float32, then rounded when stored).
    const auto store = [&](std::int64_t i, std::int64_t j, float acc) {
      float dot = math::round_to<T>(acc);
      if (a.bias) dot += bias_at(a, j);
      logits[i * v + j] = from_float<T>(dot);
    };
    if constexpr (kNarrow) {
      for (const auto& [j0, j1] : blocks) {
        const std::int64_t nb = j1 - j0;
        weight_block(j0, j1);
        gemm_f32(false, true, rows, nb, h, xc, ldx, wf, h, 0.0f, lf, nb);
        parallel_for(rows, nb, [&](std::int64_t i) {
          for (std::int64_t j = 0; j < nb; ++j) store(i, j0 + j, lf[i * nb + j]);
        });
      }
    } else {
      gemm_f32(false, true, rows, v, h, xc, ldx, w, h, 0.0f, logits, v);
      if (a.bias) {
        parallel_for(rows, v, [&](std::int64_t i) {
          for (std::int64_t j = 0; j < v; ++j) store(i, j, logits[i * v + j]);
        });
      }
    }
    const detail::CrossEntropyArgs c = detail::chunk_args(a, r0, rows, logits);
    cross_entropy_rows(c, st.scales, ws.row.offset(r0));
    if (!a.needs_grad()) continue;
    const T* dl = logits;
    const float beta_dw = r0 == 0 ? 0.0f : 1.0f;  // dW accumulates across chunks
    if constexpr (!kNarrow) {
      if (a.grad_hidden) {  // dx_c = dL @ w
        gemm_f32(false, false, rows, h, v, dl, v, w, h, 0.0f,
                 static_cast<float*>(a.grad_hidden) + r0 * h, h);
      }
      if (a.grad_weight) gemm_f32(true, false, v, h, rows, dl, v, xc, ldx, beta_dw, dw_f32(0), h);
    } else {
      for (std::size_t b = 0; b < blocks.size(); ++b) {
        const auto [j0, j1] = blocks[b];
        const std::int64_t nb = j1 - j0;
        parallel_for(rows, nb, [&](std::int64_t i) {
          for (std::int64_t j = 0; j < nb; ++j) lf[i * nb + j] = to_float(dl[i * v + j0 + j]);
        });
        if (a.grad_hidden) {  // dx_c = sum over blocks of dL_b @ w_b, in float32
          weight_block(j0, j1);
          gemm_f32(false, false, rows, h, nb, lf, nb, wf, h, b == 0 ? 0.0f : 1.0f, dxf, h);
        }
        if (!a.grad_weight) continue;
        if (f32_dw) {  // dw_b += dL_b^T @ x_c in its float32 accumulator
          gemm_f32(true, false, nb, h, rows, lf, nb, xc, ldx, beta_dw, dw_f32(j0), h);
          continue;
        }
        // dW in T: this chunk's product in float32 (in wf), added to dW with one rounding.
        gemm_f32(true, false, nb, h, rows, lf, nb, xc, ldx, 0.0f, wf, h);
        wf_holds = -1;
        auto* dw = static_cast<T*>(a.grad_weight) + j0 * h;
        parallel_for(nb, h, [&](std::int64_t j) {
          for (std::int64_t k = 0; k < h; ++k) {
            const float prev = r0 == 0 ? 0.0f : to_float(dw[j * h + k]);
            dw[j * h + k] = from_float<T>(prev + wf[j * h + k]);
          }
        });
      }
      if (a.grad_hidden) {
        auto* dx = static_cast<T*>(a.grad_hidden) + r0 * h;
        parallel_for(rows, h, [&](std::int64_t i) {
          for (std::int64_t k = 0; k < h; ++k) dx[i * h + k] = from_float<T>(dxf[i * h + k]);
        });
      }
    }
    add_dbias(a, ws, dl, rows);
  }
  finish(a, ws, st.scales, split);
}
#endif

}  // namespace

std::size_t fused_linear_cross_entropy_workspace_size(const FlceArgs& a) {
  return align(static_cast<std::size_t>(a.chunk_rows * a.ce.vocab) * element_size(a.dtype)) +
         3 * align(sizeof(float) * a.ce.rows) + align(sizeof(float) * a.ce.vocab) +
         align(sizeof(float) * dweight_floats(a)) + sizeof(float) * plan(a).scratch_floats(a);
}

// Storage is read as floats and written as T through memcpy (no type-punned pointers); the
// order of the steps is the proof in fused_linear_cross_entropy_dweight.h.
void finish_dweight(const detail::DweightSplit& split, const float* low, void* storage, DType dtype,
                    std::int64_t top_block) {
  detail::dispatch_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* bytes = static_cast<unsigned char*>(storage);
    const std::int64_t d = split.dst_offset;
    auto narrow = [&](std::int64_t j) {  // storage float j -> T element d + j
      float f;
      std::memcpy(&f, bytes + sizeof(float) * j, sizeof f);
      const T t = from_float<T>(f);
      std::memcpy(bytes + sizeof(T) * (d + j), &t, sizeof t);
    };
    detail::for_each_narrowing_step(
        split, top_block,
        [&](std::int64_t lo, std::int64_t hi) {
          for (std::int64_t j = hi - 1; j >= lo; --j) narrow(j);
        },
        [&](std::int64_t lo, std::int64_t hi) {
          parallel_for(hi - lo, 1, [&](std::int64_t i) { narrow(lo + i); });
        });
    parallel_for(d, 1, [&](std::int64_t i) {
      const T t = from_float<T>(low[i]);
      std::memcpy(bytes + sizeof(T) * i, &t, sizeof t);
    });
  });
}

void fused_linear_cross_entropy(const FlceArgs& a) {
  const Plan p = plan(a);
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
#if defined(TIGON_WITH_BLAS)
    if (p.blas) return run_blas<T>(a, p);
#endif
    run<T>(a);
  });
}

}  // namespace tigon::cpu
