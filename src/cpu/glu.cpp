// SwiGLU / GeGLU CPU backend: the product for CPU training and the oracle CUDA is tested against.
// Elementwise; work is split into fixed chunks of a row (rows and chunks in parallel), so results
// never depend on the thread count.
#include <algorithm>
#include <cstdint>

#include "core/dispatch.h"
#include "cpu/parallel.h"
#include "math/glu.h"
#include "ops/glu_args.h"

namespace tigon::cpu {
namespace {

using detail::GluBwdArgs;
using detail::GluFwdArgs;
using math::to_float;

constexpr std::int64_t kChunk = 4096;  // elements of a row per task

// Calls body(row, begin, end) over [0, rows) x [0, width) in chunks, in parallel.
template <typename Body>
void for_each_chunk(std::int64_t rows, std::int64_t width, Body&& body) {
  const std::int64_t chunks_per_row = (width + kChunk - 1) / kChunk;
  parallel_for(rows * chunks_per_row, std::min(width, kChunk) * 8, [&](std::int64_t task) {
    const std::int64_t row = task / chunks_per_row;
    const std::int64_t begin = (task % chunks_per_row) * kChunk;
    body(row, begin, std::min(width, begin + kChunk));
  });
}

template <GluActivation kAct, typename T>
void forward(const GluFwdArgs& p) {
  using Math = math::Glu<kAct, T>;
  for_each_chunk(p.rows, p.width, [&](std::int64_t row, std::int64_t begin, std::int64_t end) {
    const T* a = static_cast<const T*>(p.a) + row * p.a_row_stride;
    const T* b = static_cast<const T*>(p.b) + row * p.b_row_stride;
    T* y = static_cast<T*>(p.y) + row * p.y_row_stride;
    if (p.scaled()) {
      const float gm = p.gate_multiplier, dm = p.down_multiplier;
      for (std::int64_t j = begin; j < end; ++j) {
        y[j] = Math::forward(to_float(a[j]), to_float(b[j]), gm, dm);
      }
      return;
    }
    for (std::int64_t j = begin; j < end; ++j) y[j] = Math::forward(to_float(a[j]), to_float(b[j]));
  });
}

template <GluActivation kAct, typename T>
void backward(const GluBwdArgs& p) {
  using Math = math::Glu<kAct, T>;
  for_each_chunk(p.rows, p.width, [&](std::int64_t row, std::int64_t begin, std::int64_t end) {
    const T* dy = static_cast<const T*>(p.dy) + row * p.dy_row_stride;
    const T* a = static_cast<const T*>(p.a) + row * p.a_row_stride;
    const T* b = static_cast<const T*>(p.b) + row * p.b_row_stride;
    T* da = static_cast<T*>(p.da) + row * p.da_row_stride;
    T* db = static_cast<T*>(p.db) + row * p.db_row_stride;
    const bool scaled = p.scaled();
    const float gm = p.gate_multiplier, dm = p.down_multiplier;
    for (std::int64_t j = begin; j < end; ++j) {
      // Both inputs are read before either output is written: da may be a, db may be b.
      const auto g = scaled
                         ? Math::backward(to_float(dy[j]), to_float(a[j]), to_float(b[j]), gm, dm)
                         : Math::backward(to_float(dy[j]), to_float(a[j]), to_float(b[j]));
      da[j] = g.da;
      db[j] = g.db;
    }
  });
}

template <typename Args, typename F>
void dispatch(const Args& a, F&& f) {
  detail::dispatch_dtype(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.activation == GluActivation::kGeluTanh) {
      f.template operator()<GluActivation::kGeluTanh, T>();
    } else {
      f.template operator()<GluActivation::kSilu, T>();
    }
  });
}

}  // namespace

void glu_fwd(const GluFwdArgs& a) {
  dispatch(a, [&]<GluActivation kAct, typename T>() { forward<kAct, T>(a); });
}

void glu_bwd(const GluBwdArgs& a) {
  dispatch(a, [&]<GluActivation kAct, typename T>() { backward<kAct, T>(a); });
}

}  // namespace tigon::cpu
