// Gated RMSNorm CPU backend: the product for CPU training and the oracle CUDA will be tested
// against. RMSNorm's row sweeps (cpu/rms_norm.cpp) with the gate applied per element, rows in
// parallel, and RMSNorm's deterministic dW (cpu/column_partials.h).
#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "cpu/column_partials.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/gated_rms_norm.h"
#include "ops/gated_rms_norm_args.h"

namespace tigon::cpu {
namespace {

using detail::GatedRmsNormBwdArgs;
using detail::GatedRmsNormFwdArgs;
using math::to_float;

template <typename X, typename W>
void forward(const GatedRmsNormFwdArgs& a) {
  using Math = math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
  const auto* x = static_cast<const X*>(a.x);
  const auto* gate = static_cast<const X*>(a.gate);
  const auto* w = static_cast<const W*>(a.weight);
  auto* y = static_cast<X*>(a.y);
  const std::int64_t hidden = a.hidden;

  parallel_for(a.rows, hidden, [&](std::int64_t row) {
    const X* xr = x + row * a.x_row_stride;
    const X* gr = gate + row * a.gate_row_stride;
    X* yr = y + row * a.y_row_stride;
    const float sum =
        lane_sum(hidden, [&](std::int64_t j) { return Norm::square(to_float(xr[j])); });
    const float r = Norm::rstd(sum, hidden, a.params.eps);
    for (std::int64_t j = 0; j < hidden; ++j) {
      yr[j] = Math::output(Math::weighted(to_float(xr[j]), r, w[j]), to_float(gr[j]));
    }
    a.rstd[row] = r;
  });
}

template <typename X, typename W>
void backward(const GatedRmsNormBwdArgs& a) {
  using Math = math::GatedRmsNorm<X, W>;
  using Norm = typename Math::Norm;
  const auto* dy = static_cast<const X*>(a.dy);
  const auto* x = static_cast<const X*>(a.x);
  const auto* gate = static_cast<const X*>(a.gate);
  const auto* w = static_cast<const W*>(a.weight);
  auto* dx = static_cast<X*>(a.dx);
  auto* dgate = static_cast<X*>(a.dgate);
  const std::int64_t hidden = a.hidden;
  const std::int64_t chunks = row_chunks(a.rows);
  const std::int64_t rows_per_chunk = chunks ? (a.rows + chunks - 1) / chunks : 0;
  auto* partials = static_cast<float*>(a.workspace);

  parallel_for(chunks, rows_per_chunk * hidden, [&](std::int64_t chunk) {
    float* partial = partials + chunk * hidden;
    std::memset(partial, 0, sizeof(float) * hidden);
    const std::int64_t end = std::min(a.rows, (chunk + 1) * rows_per_chunk);
    for (std::int64_t row = chunk * rows_per_chunk; row < end; ++row) {
      const X* dyr = dy + row * a.dy_row_stride;
      const X* xr = x + row * a.x_row_stride;
      const X* gr = gate + row * a.gate_row_stride;
      X* dxr = dx + row * a.dx_row_stride;
      X* dgr = dgate + row * a.dgate_row_stride;
      const float r = a.rstd[row];
      const float sum_m_xhat = lane_sum(hidden, [&](std::int64_t j) {
        const float dp = Math::grad_norm_output(to_float(dyr[j]), to_float(gr[j]));
        return Norm::grad_scaled(dp, Norm::scale(w[j], 0.0f)) * (to_float(xr[j]) * r);
      });
      const float mean_m_xhat = sum_m_xhat / static_cast<float>(hidden);
      for (std::int64_t j = 0; j < hidden; ++j) {
        // dy[j], x[j] and gate[j] are read before dx[j] / dgate[j] may overwrite dy[j].
        const float g = to_float(dyr[j]);
        const float xf = to_float(xr[j]);
        const float gf = to_float(gr[j]);
        const float dp = Math::grad_norm_output(g, gf);
        partial[j] += Norm::grad_weight_term(dp, xf, r);
        const float m = Norm::grad_scaled(dp, Norm::scale(w[j], 0.0f));
        dxr[j] = math::from_float<X>(Norm::grad_input(m, xf * r, r, mean_m_xhat));
        dgr[j] = Math::grad_gate(g, Math::weighted(xf, r, w[j]), gf);
      }
    }
  });

  finish_column_sums(partials, chunks, hidden, static_cast<W*>(a.dw));
}

// Calls f.template operator()<X, W>() for the dtypes in the arguments.
template <typename Args, typename F>
void dispatch(const Args& a, F&& f) {
  detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
    detail::dispatch_dtype(a.weight_dtype, [&](auto w_tag) {
      f.template operator()<typename decltype(x_tag)::type, typename decltype(w_tag)::type>();
    });
  });
}

}  // namespace

std::size_t gated_rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden) {
  return static_cast<std::size_t>(row_chunks(rows) * hidden) * sizeof(float);
}

void gated_rms_norm_fwd(const GatedRmsNormFwdArgs& a) {
  dispatch(a, [&]<typename X, typename W>() { forward<X, W>(a); });
}

void gated_rms_norm_bwd(const GatedRmsNormBwdArgs& a) {
  if (a.rows == 0) {
    std::memset(a.dw, 0, element_size(a.weight_dtype) * a.hidden);
    return;
  }
  dispatch(a, [&]<typename X, typename W>() { backward<X, W>(a); });
}

}  // namespace tigon::cpu
