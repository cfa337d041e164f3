// PolyNorm CPU backend: the product for CPU training and the oracle a CUDA backend will be tested
// against. Rows run in parallel; the parameter gradients are sums in a fixed order (float64 totals
// per fixed chunk of rows, added in chunk order), whatever the thread count.
#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "cpu/column_partials.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/poly_norm.h"
#include "ops/poly_norm_args.h"

namespace tigon::cpu {
namespace {

using detail::PolyNormBwdArgs;
using detail::PolyNormFwdArgs;
using math::to_float;

// Per-chunk float64 totals: dweight[0..2] (cube, square, x), dbias.
constexpr std::int64_t kTotals = 4;

// The parameters as float32 values: w = {w0, w1, w2}, b.
struct Scalars {
  float w[3];
  float b;
};

template <typename X>
struct RowStats {
  using Math = math::PolyNorm<X>;
  float r[3];  // r1 (x), r2 (x^2), r3 (x^3)

  RowStats(const X* xr, std::int64_t hidden, float eps) {
    for (int k = 0; k < 3; ++k) {
      const float sum = lane_sum(hidden, [&](std::int64_t j) {
        const auto p = Math::powers(to_float(xr[j]));
        return Math::square(k == 0 ? p.p1 : k == 1 ? p.p2 : p.p3);
      });
      r[k] = Math::rstd(sum, hidden, eps);
    }
  }
};

template <typename X>
void forward(const PolyNormFwdArgs& a, const Scalars& s) {
  using Math = math::PolyNorm<X>;
  const auto* x = static_cast<const X*>(a.x);
  auto* y = static_cast<X*>(a.y);
  const std::int64_t hidden = a.hidden;
  parallel_for(a.rows, 4 * hidden, [&](std::int64_t row) {
    const X* xr = x + row * a.x_row_stride;
    X* yr = y + row * a.y_row_stride;
    const RowStats<X> st(xr, hidden, a.params.eps);
    for (std::int64_t j = 0; j < hidden; ++j) {
      yr[j] = Math::output(Math::powers(to_float(xr[j])), s.w, st.r, s.b);
    }
  });
}

template <typename X>
void backward(const PolyNormBwdArgs& a, const Scalars& s) {
  using Math = math::PolyNorm<X>;
  const auto* dy = static_cast<const X*>(a.dy);
  const auto* x = static_cast<const X*>(a.x);
  auto* dx = static_cast<X*>(a.dx);
  const std::int64_t hidden = a.hidden;
  const std::int64_t chunks = row_chunks(a.rows);
  const std::int64_t rows_per_chunk = (a.rows + chunks - 1) / chunks;
  auto* totals = static_cast<double*>(a.workspace);  // [chunks, kTotals]

  parallel_for(chunks, rows_per_chunk * hidden * 6, [&](std::int64_t chunk) {
    double t[kTotals] = {};
    const std::int64_t end = std::min(a.rows, (chunk + 1) * rows_per_chunk);
    for (std::int64_t row = chunk * rows_per_chunk; row < end; ++row) {
      const X* dyr = dy + row * a.dy_row_stride;
      const X* xr = x + row * a.x_row_stride;
      X* dxr = dx + row * a.dx_row_stride;
      const RowStats<X> st(xr, hidden, a.params.eps);
      // The row sums first: the last sweep overwrites dy when dx is dy (in place).
      float sums[3];
      for (int k = 0; k < 3; ++k) {
        sums[k] = lane_sum(hidden, [&](std::int64_t j) {
          const auto p = Math::powers(to_float(xr[j]));
          return to_float(dyr[j]) * (k == 0 ? p.p1 : k == 1 ? p.p2 : p.p3);
        });
      }
      const float dy_sum = lane_sum(hidden, [&](std::int64_t j) { return to_float(dyr[j]); });
      float c[3];
      for (int k = 0; k < 3; ++k) c[k] = Math::grad_coefficient(st.r[k], sums[k], hidden);
      // dweight[0] is the cube's: r3 * S3.
      t[0] += static_cast<double>(st.r[2] * sums[2]);
      t[1] += static_cast<double>(st.r[1] * sums[1]);
      t[2] += static_cast<double>(st.r[0] * sums[0]);
      t[3] += static_cast<double>(dy_sum);
      for (std::int64_t j = 0; j < hidden; ++j) {
        const float xf = to_float(xr[j]);
        const float g = to_float(dyr[j]);  // read before dx[j] may overwrite it (in place)
        dxr[j] = Math::grad_input(xf, g, Math::powers(xf), s.w, st.r, c);
      }
    }
    std::copy(t, t + kTotals, totals + chunk * kTotals);
  });

  double sum[kTotals] = {};
  for (std::int64_t ch = 0; ch < chunks; ++ch) {
    for (int k = 0; k < kTotals; ++k) sum[k] += totals[ch * kTotals + k];
  }
  detail::dispatch_dtype(a.params.weight_dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    for (int k = 0; k < 3; ++k) {
      static_cast<W*>(a.dweight)[k] = math::from_float<W>(static_cast<float>(sum[k]));
    }
  });
  detail::dispatch_dtype(a.params.bias_dtype, [&](auto tag) {
    using B = typename decltype(tag)::type;
    *static_cast<B*>(a.dbias) = math::from_float<B>(static_cast<float>(sum[3]));
  });
}

Scalars scalars(const detail::PolyNormParams& p) {
  Scalars s{};
  detail::dispatch_dtype(p.weight_dtype, [&](auto tag) {
    using W = typename decltype(tag)::type;
    for (int k = 0; k < 3; ++k) s.w[k] = to_float(static_cast<const W*>(p.weight)[k]);
  });
  detail::dispatch_dtype(p.bias_dtype, [&](auto tag) {
    using B = typename decltype(tag)::type;
    s.b = to_float(*static_cast<const B*>(p.bias));
  });
  return s;
}

void zero(void* p, DType dtype, std::int64_t n) {
  if (p) std::memset(p, 0, element_size(dtype) * n);
}

}  // namespace

std::size_t poly_norm_bwd_workspace_size(std::int64_t rows, std::int64_t) {
  return static_cast<std::size_t>(row_chunks(rows)) * kTotals * sizeof(double);
}

void poly_norm_fwd(const PolyNormFwdArgs& a) {
  const Scalars s = scalars(a.params);
  detail::dispatch_dtype(a.x_dtype, [&](auto tag) { forward<typename decltype(tag)::type>(a, s); });
}

void poly_norm_bwd(const PolyNormBwdArgs& a) {
  if (a.rows == 0) {
    zero(a.dweight, a.params.weight_dtype, 3);
    zero(a.dbias, a.params.bias_dtype, 1);
    return;
  }
  const Scalars s = scalars(a.params);
  detail::dispatch_dtype(a.x_dtype,
                         [&](auto tag) { backward<typename decltype(tag)::type>(a, s); });
}

}  // namespace tigon::cpu
