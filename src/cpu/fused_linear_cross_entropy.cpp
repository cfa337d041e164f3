// Fused linear cross-entropy CPU backend: plain parallel matrix products around the CPU
// cross-entropy rows, chunk by chunk, with the same accumulation semantics as the CUDA backend
// (dweight accumulated in float32 or in its own dtype, one rounding per chunk; the float32
// accumulation of a 16-bit dweight in place, fused_linear_cross_entropy_dweight.h).
// Correctness first, not speed.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "ops/fused_linear_cross_entropy_args.h"

namespace tigon::cpu {
namespace {

using detail::FlceArgs;
using math::from_float;
using math::to_float;

struct Workspace {
  void* logits;          // [chunk, V] in the activations' dtype
  detail::RowTerms row;  // [N] each
  float* dbias;          // [V] float32 accumulator
  float* dweight;        // rows [0, R) of a 16-bit dweight accumulated in float32 (dweight_fp32)
};

std::size_t align(std::size_t b) { return (b + 63) / 64 * 64; }

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
  return w;
}

float bias_at(const FlceArgs& a, std::int64_t v) {
  return detail::dispatch_dtype(a.bias_dtype, [&](auto tag) {
    return to_float(static_cast<const typename decltype(tag)::type*>(a.bias)[v]);
  });
}

template <typename T>
void run(const FlceArgs& a) {
  const std::int64_t n = a.ce.rows, v = a.ce.vocab, h = a.hidden_size;
  const auto* x = static_cast<const T*>(a.hidden);
  const auto* w = static_cast<const T*>(a.weight);
  const Workspace ws = carve(a);
  auto* logits = static_cast<T*>(ws.logits);
  const detail::CeScales scales = cross_entropy_scales(a.ce);
  const detail::DweightSplit split = detail::dweight_split(v, h);
  if (a.grad_bias) std::fill(ws.dbias, ws.dbias + v, 0.0f);

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
    cross_entropy_rows(c, scales, ws.row.offset(r0));
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
    if (a.grad_bias) {
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < v; ++j) ws.dbias[j] += to_float(dl[i * v + j]);
    }
  }
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

}  // namespace

std::size_t fused_linear_cross_entropy_workspace_size(const FlceArgs& a) {
  const std::size_t dweight =
      a.dweight_fp32 ? detail::dweight_split(a.ce.vocab, a.hidden_size).low_floats() : 0;
  return align(static_cast<std::size_t>(a.chunk_rows * a.ce.vocab) * element_size(a.dtype)) +
         3 * align(sizeof(float) * a.ce.rows) + align(sizeof(float) * a.ce.vocab) +
         sizeof(float) * dweight;
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
  detail::dispatch_dtype(a.dtype, [&](auto tag) { run<typename decltype(tag)::type>(a); });
}

}  // namespace tigon::cpu
