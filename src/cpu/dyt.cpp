// DyT CPU backend: the product for CPU training and the oracle a CUDA backend will be tested
// against. Rows run in parallel; the parameter gradients are sums in a fixed order
// (column_partials.h), whatever the thread count.
#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "cpu/column_partials.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/dyt.h"
#include "ops/dyt_args.h"

namespace tigon::cpu {
namespace {

using detail::DytBwdArgs;
using detail::DytFwdArgs;
using math::to_float;

template <typename T>
float scalar(const void* p) {
  return to_float(*static_cast<const T*>(p));
}

template <typename X, typename G, typename B>
void forward(const DytFwdArgs& a, float alpha) {
  using Math = math::DyT<X>;
  const auto* x = static_cast<const X*>(a.x);
  const auto* gamma = static_cast<const G*>(a.params.gamma);
  const auto* beta = static_cast<const B*>(a.params.beta);
  auto* y = static_cast<X*>(a.y);
  const std::int64_t hidden = a.hidden;
  parallel_for(a.rows, hidden, [&](std::int64_t row) {
    const X* xr = x + row * a.x_row_stride;
    X* yr = y + row * a.y_row_stride;
    for (std::int64_t j = 0; j < hidden; ++j) {
      const float t = Math::activation(alpha, to_float(xr[j]));
      yr[j] = Math::output(t, to_float(gamma[j]), beta ? to_float(beta[j]) : 0.0f);
    }
  });
}

template <typename X, typename G, typename B>
void backward(const DytBwdArgs& a, float alpha) {
  using Math = math::DyT<X>;
  const auto* dy = static_cast<const X*>(a.dy);
  const auto* x = static_cast<const X*>(a.x);
  const auto* gamma = static_cast<const G*>(a.params.gamma);
  auto* dx = static_cast<X*>(a.dx);
  const bool has_beta = a.dbeta != nullptr;
  const std::int64_t hidden = a.hidden;
  const std::int64_t chunks = row_chunks(a.rows);
  const std::int64_t rows_per_chunk = (a.rows + chunks - 1) / chunks;
  // Workspace: [chunks] float64 dalpha totals, then [chunks, hidden] float32 dgamma partials,
  // then (with beta) [chunks, hidden] dbeta partials.
  auto* alpha_totals = static_cast<double*>(a.workspace);
  auto* gamma_partials = reinterpret_cast<float*>(alpha_totals + chunks);
  float* beta_partials = has_beta ? gamma_partials + chunks * hidden : nullptr;

  parallel_for(chunks, rows_per_chunk * hidden, [&](std::int64_t chunk) {
    float* dgamma = gamma_partials + chunk * hidden;
    float* dbeta = has_beta ? beta_partials + chunk * hidden : nullptr;
    std::memset(dgamma, 0, sizeof(float) * hidden);
    if (dbeta) std::memset(dbeta, 0, sizeof(float) * hidden);
    double alpha_total = 0.0;
    const std::int64_t end = std::min(a.rows, (chunk + 1) * rows_per_chunk);
    for (std::int64_t row = chunk * rows_per_chunk; row < end; ++row) {
      const X* dyr = dy + row * a.dy_row_stride;
      const X* xr = x + row * a.x_row_stride;
      X* dxr = dx + row * a.dx_row_stride;
      // dalpha's row sum first: the second sweep overwrites dy when dx is dy (in place).
      alpha_total += lane_sum(hidden, [&](std::int64_t j) {
        const float xf = to_float(xr[j]);
        const float t = Math::activation(alpha, xf);
        return Math::grad_alpha_term(xf, Math::grad_pre(t, to_float(dyr[j]), to_float(gamma[j])));
      });
      for (std::int64_t j = 0; j < hidden; ++j) {
        const float g = to_float(dyr[j]);  // read before dx[j] may overwrite it (in place)
        const float t = Math::activation(alpha, to_float(xr[j]));
        dgamma[j] += Math::grad_gamma_term(g, t);
        if (dbeta) dbeta[j] += g;
        dxr[j] = Math::grad_input(alpha, Math::grad_pre(t, g, to_float(gamma[j])));
      }
    }
    alpha_totals[chunk] = alpha_total;
  });

  double dalpha = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) dalpha += alpha_totals[c];
  detail::dispatch_dtype(a.params.alpha_dtype, [&](auto tag) {
    using A = typename decltype(tag)::type;
    *static_cast<A*>(a.dalpha) = math::from_float<A>(static_cast<float>(dalpha));
  });
  finish_column_sums(gamma_partials, chunks, hidden, static_cast<G*>(a.dgamma));
  if (has_beta) {
    detail::dispatch_dtype(a.params.beta_dtype, [&](auto tag) {
      using B2 = typename decltype(tag)::type;
      finish_column_sums(beta_partials, chunks, hidden, static_cast<B2*>(a.dbeta));
    });
  }
}

// Calls f.template operator()<X, G, B>(alpha) for the dtypes in the arguments.
template <typename Args, typename F>
void dispatch(const Args& a, F&& f) {
  const detail::DytParams& p = a.params;
  const float alpha = detail::dispatch_dtype(
      p.alpha_dtype, [&](auto tag) { return scalar<typename decltype(tag)::type>(p.alpha); });
  detail::dispatch_dtype(a.x_dtype, [&](auto x_tag) {
    detail::dispatch_dtype(p.gamma_dtype, [&](auto g_tag) {
      detail::dispatch_dtype(p.beta_dtype, [&](auto b_tag) {
        f.template operator()<typename decltype(x_tag)::type, typename decltype(g_tag)::type,
                              typename decltype(b_tag)::type>(alpha);
      });
    });
  });
}

void zero(void* p, DType dtype, std::int64_t n) {
  if (p) std::memset(p, 0, element_size(dtype) * n);
}

}  // namespace

std::size_t dyt_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool has_beta) {
  const auto chunks = static_cast<std::size_t>(row_chunks(rows));
  return chunks * sizeof(double) +
         chunks * static_cast<std::size_t>(hidden) * sizeof(float) * (has_beta ? 2 : 1);
}

void dyt_fwd(const DytFwdArgs& a) {
  dispatch(a, [&]<typename X, typename G, typename B>(float alpha) { forward<X, G, B>(a, alpha); });
}

void dyt_bwd(const DytBwdArgs& a) {
  if (a.rows == 0) {
    zero(a.dalpha, a.params.alpha_dtype, 1);
    zero(a.dgamma, a.params.gamma_dtype, a.hidden);
    zero(a.dbeta, a.params.beta_dtype, a.hidden);
    return;
  }
  dispatch(a,
           [&]<typename X, typename G, typename B>(float alpha) { backward<X, G, B>(a, alpha); });
}

}  // namespace tigon::cpu
