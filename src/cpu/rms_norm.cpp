// RMSNorm CPU backend: the product for CPU training and the oracle CUDA is tested against.
// Each row is read once from memory (the second sweep hits cache), rows run in parallel, and
// the inner loops are plain float loops over 16 lanes that g++ vectorizes. With a residual
// (fused_add_rms_norm) the row normalized is h = x + residual, formed and stored first, and the
// backward adds h's own gradient to dx.
#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "cpu/column_partials.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/residual_add.h"
#include "math/rms_norm.h"
#include "ops/rms_norm_args.h"

namespace tigon::cpu {
namespace {

using detail::RmsNormBwdArgs;
using detail::RmsNormFwdArgs;
using math::to_float;

template <typename Math, typename X, typename W, bool kResidual>
void forward(const RmsNormFwdArgs& a) {
  using Y = typename Math::Y;
  const auto* x = static_cast<const X*>(a.x);
  const auto* w = static_cast<const W*>(a.weight);
  auto* y = static_cast<Y*>(a.y);
  const std::int64_t hidden = a.hidden;
  const float eps = a.params.eps;
  const float offset = a.params.offset;

  parallel_for(a.rows, hidden, [&](std::int64_t row) {
    const X* xr = x + row * a.x_row_stride;
    Y* yr = y + row * a.y_row_stride;
    if constexpr (kResidual) {
      const X* rr = static_cast<const X*>(a.residual) + row * a.residual_row_stride;
      X* hr = static_cast<X*>(a.h) + row * a.h_row_stride;
      for (std::int64_t j = 0; j < hidden; ++j) hr[j] = math::ResidualAdd<X>::sum(xr[j], rr[j]);
      xr = hr;  // the row normalized is h, which this row's sweeps now read from cache
    }
    const float sum =
        lane_sum(hidden, [&](std::int64_t j) { return Math::square(to_float(xr[j])); });
    const float r = Math::rstd(sum, hidden, eps);
    for (std::int64_t j = 0; j < hidden; ++j) {
      const float s = w ? Math::scale(w[j], offset) : 1.0f;
      yr[j] = Math::output(Math::normalized(to_float(xr[j]), r), s);
    }
    a.rstd[row] = r;
  });
}

template <typename Math, typename X, typename W, bool kResidual>
void backward(const RmsNormBwdArgs& a) {
  using Y = typename Math::Y;
  const auto* dy = static_cast<const Y*>(a.dy);
  const auto* x = static_cast<const X*>(a.x);
  const auto* w = static_cast<const W*>(a.weight);
  auto* dx = static_cast<X*>(a.dx);
  const std::int64_t hidden = a.hidden;
  const float offset = a.params.offset;
  const std::int64_t chunks = row_chunks(a.rows);
  const std::int64_t rows_per_chunk = chunks ? (a.rows + chunks - 1) / chunks : 0;
  auto* partials = static_cast<float*>(a.workspace);

  parallel_for(chunks, rows_per_chunk * hidden, [&](std::int64_t chunk) {
    float* partial = w ? partials + chunk * hidden : nullptr;
    if (partial) std::memset(partial, 0, sizeof(float) * hidden);
    const std::int64_t end = std::min(a.rows, (chunk + 1) * rows_per_chunk);
    for (std::int64_t row = chunk * rows_per_chunk; row < end; ++row) {
      const Y* dyr = dy + row * a.dy_row_stride;
      const X* xr = x + row * a.x_row_stride;
      X* dxr = dx + row * a.dx_row_stride;
      const X* dhr = kResidual ? static_cast<const X*>(a.dh) + row * a.dh_row_stride : nullptr;
      const float r = a.rstd[row];
      const float sum_m_xhat = lane_sum(hidden, [&](std::int64_t j) {
        const float s = w ? Math::scale(w[j], offset) : 1.0f;
        return Math::grad_scaled(to_float(dyr[j]), s) * (to_float(xr[j]) * r);
      });
      const float mean_m_xhat = sum_m_xhat / static_cast<float>(hidden);
      for (std::int64_t j = 0; j < hidden; ++j) {
        // dy[j] and dh[j] are read before dx[j] may overwrite either (in place).
        const float g = to_float(dyr[j]);
        const float xf = to_float(xr[j]);
        const float s = w ? Math::scale(w[j], offset) : 1.0f;
        if (partial) partial[j] += Math::grad_weight_term(g, xf, r);
        const float norm_dx = Math::grad_input(Math::grad_scaled(g, s), xf * r, r, mean_m_xhat);
        if constexpr (kResidual) {
          dxr[j] = math::ResidualAdd<X>::grad(to_float(dhr[j]), norm_dx);
        } else {
          dxr[j] = math::from_float<X>(norm_dx);
        }
      }
    }
  });

  if (!w) return;
  finish_column_sums(partials, chunks, hidden, static_cast<W*>(a.dw));
}

// Calls f.template operator()<Math, X, W, kResidual>() for the options in the arguments.
template <typename Args, typename F>
void dispatch(const Args& a, bool residual, F&& f) {
  detail::dispatch_casting_mode(a.params.casting_mode, [&](auto mode) {
    detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
      detail::dispatch_dtype(a.weight_dtype, [&](auto w_tag) {
        detail::dispatch_bool(a.weight != nullptr, [&](auto affine) {
          detail::dispatch_bool(residual, [&](auto with_residual) {
            using X = typename decltype(x_tag)::type;
            using W = typename decltype(w_tag)::type;
            f.template
            operator()<math::RmsNorm<decltype(mode)::value, X, W, decltype(affine)::value>, X, W,
                       decltype(with_residual)::value>();
          });
        });
      });
    });
  });
}

}  // namespace

std::size_t rms_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool has_weight) {
  return has_weight ? static_cast<std::size_t>(row_chunks(rows) * hidden) * sizeof(float) : 0;
}

void rms_norm_fwd(const RmsNormFwdArgs& a) {
  dispatch(a, a.residual != nullptr, [&]<typename Math, typename X, typename W, bool kResidual>() {
    forward<Math, X, W, kResidual>(a);
  });
}

void rms_norm_bwd(const RmsNormBwdArgs& a) {
  if (a.rows == 0) {
    if (a.dw) std::memset(a.dw, 0, element_size(a.weight_dtype) * a.hidden);
    return;
  }
  dispatch(a, a.dh != nullptr, [&]<typename Math, typename X, typename W, bool kResidual>() {
    backward<Math, X, W, kResidual>(a);
  });
}

}  // namespace tigon::cpu
