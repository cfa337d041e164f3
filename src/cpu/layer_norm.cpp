// LayerNorm CPU backend: the product for CPU training and the oracle CUDA will be tested against.
// Rows run in parallel; a row is read from memory once (the later sweeps hit cache), and its sums
// are lane sums: a fixed order, the same bits on any number of threads.
#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "cpu/column_partials.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/layer_norm.h"
#include "ops/layer_norm_args.h"

namespace tigon::cpu {
namespace {

using detail::LayerNormBwdArgs;
using detail::LayerNormFwdArgs;
using math::to_float;

template <typename X, typename W, typename B>
void forward(const LayerNormFwdArgs& a) {
  using Math = math::LayerNorm<X, W, B>;
  const auto* x = static_cast<const X*>(a.x);
  const auto* w = static_cast<const W*>(a.weight);
  const auto* b = static_cast<const B*>(a.bias);
  auto* y = static_cast<X*>(a.y);
  const std::int64_t hidden = a.hidden;

  parallel_for(a.rows, hidden, [&](std::int64_t row) {
    const X* xr = x + row * a.x_row_stride;
    X* yr = y + row * a.y_row_stride;
    const float mean =
        Math::mean(lane_sum(hidden, [&](std::int64_t j) { return to_float(xr[j]); }), hidden);
    const float sum_sq = lane_sum(
        hidden, [&](std::int64_t j) { return Math::centered_square(to_float(xr[j]), mean); });
    const float r = Math::rstd(sum_sq, hidden, a.params.eps);
    for (std::int64_t j = 0; j < hidden; ++j) {
      yr[j] = Math::output(Math::normalized(to_float(xr[j]), mean, r), Math::weight(w, j),
                           Math::bias(b, j));
    }
    a.mean[row] = mean;
    a.rstd[row] = r;
  });
}

// Adds one row's dW and dB terms to its chunk's partials, writes its dx.
template <typename X, typename W>
void backward_row(const LayerNormBwdArgs& a, std::int64_t row, float* dw_partial,
                  float* db_partial) {
  using Math = math::LayerNorm<X, W, X>;
  const auto* w = static_cast<const W*>(a.weight);
  const X* dyr = static_cast<const X*>(a.dy) + row * a.dy_row_stride;
  const X* xr = static_cast<const X*>(a.x) + row * a.x_row_stride;
  X* dxr = static_cast<X*>(a.dx) + row * a.dx_row_stride;
  const std::int64_t hidden = a.hidden;
  const float mean = a.mean[row], r = a.rstd[row];
  auto g_at = [&](std::int64_t j) {
    return Math::grad_scaled(to_float(dyr[j]), Math::weight(w, j));
  };
  auto xhat_at = [&](std::int64_t j) { return Math::normalized(to_float(xr[j]), mean, r); };
  const float n = static_cast<float>(hidden);
  const float mean_g_xhat =
      lane_sum(hidden, [&](std::int64_t j) { return g_at(j) * xhat_at(j); }) / n;
  const float mean_g = lane_sum(hidden, g_at) / n;
  for (std::int64_t j = 0; j < hidden; ++j) {
    const float dy = to_float(dyr[j]);  // read before dx[j] may overwrite it (in place)
    const float xhat = xhat_at(j);
    if (dw_partial) dw_partial[j] += Math::grad_weight_term(dy, xhat);
    if (db_partial) db_partial[j] += dy;
    dxr[j] =
        Math::grad_input(Math::grad_scaled(dy, Math::weight(w, j)), xhat, r, mean_g_xhat, mean_g);
  }
}

template <typename X, typename W, typename DB>
void backward(const LayerNormBwdArgs& a) {
  const std::int64_t hidden = a.hidden;
  const std::int64_t chunks = row_chunks(a.rows);
  const std::int64_t rows_per_chunk = (a.rows + chunks - 1) / chunks;
  float* dw_partials = a.dw ? static_cast<float*>(a.workspace) : nullptr;
  float* db_partials =
      a.db ? static_cast<float*>(a.workspace) + (a.dw ? chunks * hidden : 0) : nullptr;

  parallel_for(chunks, rows_per_chunk * hidden, [&](std::int64_t chunk) {
    float* dw_partial = dw_partials ? dw_partials + chunk * hidden : nullptr;
    float* db_partial = db_partials ? db_partials + chunk * hidden : nullptr;
    if (dw_partial) std::memset(dw_partial, 0, sizeof(float) * hidden);
    if (db_partial) std::memset(db_partial, 0, sizeof(float) * hidden);
    const std::int64_t end = std::min(a.rows, (chunk + 1) * rows_per_chunk);
    for (std::int64_t row = chunk * rows_per_chunk; row < end; ++row) {
      backward_row<X, W>(a, row, dw_partial, db_partial);
    }
  });
  if (dw_partials) finish_column_sums(dw_partials, chunks, hidden, static_cast<W*>(a.dw));
  if (db_partials) finish_column_sums(db_partials, chunks, hidden, static_cast<DB*>(a.db));
}

}  // namespace

std::size_t layer_norm_bwd_workspace_size(std::int64_t rows, std::int64_t hidden, bool wants_dw,
                                          bool wants_db) {
  const std::int64_t buffers = (wants_dw ? 1 : 0) + (wants_db ? 1 : 0);
  return static_cast<std::size_t>(buffers * row_chunks(rows) * hidden) * sizeof(float);
}

void layer_norm_fwd(const LayerNormFwdArgs& a) {
  detail::dispatch_norm_types(a.x_dtype, a.weight_dtype, a.bias_dtype,
                              [&]<typename X, typename W, typename B>() { forward<X, W, B>(a); });
}

void layer_norm_bwd(const LayerNormBwdArgs& a) {
  if (a.rows == 0) {
    if (a.dw) std::memset(a.dw, 0, element_size(a.weight_dtype) * a.hidden);
    if (a.db) std::memset(a.db, 0, element_size(a.db_dtype) * a.hidden);
    return;
  }
  detail::dispatch_norm_types(
      a.x_dtype, a.weight_dtype, a.db_dtype,
      [&]<typename X, typename W, typename DB>() { backward<X, W, DB>(a); });
}

}  // namespace tigon::cpu
