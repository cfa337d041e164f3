// GroupNorm CPU backend: the product for CPU training and the oracle CUDA is tested against.
// (sample, group) rows run in parallel; each row's sums are lane sums (a fixed order, the same bits
// on any number of threads), and dW / dB add the per-(sample, channel) sums in sample order.
#include <cstring>

#include "core/dispatch.h"
#include "cpu/column_partials.h"
#include "cpu/lane_sum.h"
#include "cpu/parallel.h"
#include "math/group_norm.h"
#include "ops/group_norm_args.h"

namespace tigon::cpu {
namespace {

using detail::GroupNormBwdArgs;
using detail::GroupNormFwdArgs;
using math::to_float;

template <typename X, typename W, typename B>
void forward(const GroupNormFwdArgs& a) {
  using Math = math::GroupNorm<X, W, B>;
  const auto* w = static_cast<const W*>(a.weight);
  const auto* b = static_cast<const B*>(a.bias);
  const std::int64_t groups = a.shape.groups, spatial = a.shape.spatial;
  const std::int64_t per_group = a.shape.channels_per_group(), length = a.shape.group_size();

  parallel_for(a.shape.rows(), length, [&](std::int64_t row) {
    const std::int64_t n = row / groups, g = row % groups;
    const X* xr = static_cast<const X*>(a.x) + n * a.x_sample_stride + g * length;
    X* yr = static_cast<X*>(a.y) + n * a.y_sample_stride + g * length;
    const float mean =
        Math::mean(lane_sum(length, [&](std::int64_t j) { return to_float(xr[j]); }), length);
    const float sum_sq = lane_sum(
        length, [&](std::int64_t j) { return Math::centered_square(to_float(xr[j]), mean); });
    const float r = Math::rstd(sum_sq, length, a.params.eps);
    for (std::int64_t k = 0; k < per_group; ++k) {
      const std::int64_t c = g * per_group + k;
      const float wc = Math::weight(w, c), bc = Math::bias(b, c);
      for (std::int64_t j = k * spatial; j < (k + 1) * spatial; ++j) {
        yr[j] = Math::output(Math::normalized(to_float(xr[j]), mean, r), wc, bc);
      }
    }
    a.mean[row] = mean;
    a.rstd[row] = r;
  });
}

template <typename X, typename W>
void backward_row(const GroupNormBwdArgs& a, std::int64_t row, float* sums_dy_xhat,
                  float* sums_dy) {
  using Math = math::GroupNorm<X, W, X>;
  const auto* w = static_cast<const W*>(a.weight);
  const std::int64_t groups = a.shape.groups, spatial = a.shape.spatial;
  const std::int64_t per_group = a.shape.channels_per_group(), length = a.shape.group_size();
  const std::int64_t n = row / groups, g = row % groups;
  const X* dyr = static_cast<const X*>(a.dy) + n * a.dy_sample_stride + g * length;
  const X* xr = static_cast<const X*>(a.x) + n * a.x_sample_stride + g * length;
  X* dxr = static_cast<X*>(a.dx) + n * a.dx_sample_stride + g * length;
  const float mean = a.mean[row], r = a.rstd[row];
  auto xhat_at = [&](std::int64_t j) { return Math::normalized(to_float(xr[j]), mean, r); };

  // Per channel: A = sum(dy * xhat), B = sum(dy); then the row's c1, c2 from them in channel order.
  float weighted_a = 0.0f, weighted_b = 0.0f;
  for (std::int64_t k = 0; k < per_group; ++k) {
    const std::int64_t c = g * per_group + k, first = k * spatial;
    const float sum_a = lane_sum(
        spatial, [&](std::int64_t s) { return to_float(dyr[first + s]) * xhat_at(first + s); });
    const float sum_b = lane_sum(spatial, [&](std::int64_t s) { return to_float(dyr[first + s]); });
    sums_dy_xhat[n * a.shape.channels + c] = sum_a;
    sums_dy[n * a.shape.channels + c] = sum_b;
    weighted_a += Math::weighted_channel_term(Math::weight(w, c), sum_a);
    weighted_b += Math::weighted_channel_term(Math::weight(w, c), sum_b);
  }
  const float c1 = Math::row_mean(weighted_a, length), c2 = Math::row_mean(weighted_b, length);
  for (std::int64_t k = 0; k < per_group; ++k) {
    const float wc = Math::weight(w, g * per_group + k);
    for (std::int64_t j = k * spatial; j < (k + 1) * spatial; ++j) {
      dxr[j] = Math::grad_input(Math::grad_scaled(to_float(dyr[j]), wc), xhat_at(j), r, c1, c2);
    }
  }
}

template <typename X, typename W, typename DB>
void backward(const GroupNormBwdArgs& a) {
  const std::int64_t samples = a.shape.samples, channels = a.shape.channels;
  float* sums_dy_xhat = static_cast<float*>(a.workspace);
  float* sums_dy = sums_dy_xhat + samples * channels;
  parallel_for(a.shape.rows(), a.shape.group_size(),
               [&](std::int64_t row) { backward_row<X, W>(a, row, sums_dy_xhat, sums_dy); });
  if (a.dw) finish_column_sums(sums_dy_xhat, samples, channels, static_cast<W*>(a.dw));
  if (a.db) finish_column_sums(sums_dy, samples, channels, static_cast<DB*>(a.db));
}

}  // namespace

void group_norm_fwd(const GroupNormFwdArgs& a) {
  detail::dispatch_norm_types(a.x_dtype, a.weight_dtype, a.bias_dtype,
                              [&]<typename X, typename W, typename B>() { forward<X, W, B>(a); });
}

void group_norm_bwd(const GroupNormBwdArgs& a) {
  if (a.shape.samples == 0) {
    if (a.dw) std::memset(a.dw, 0, element_size(a.weight_dtype) * a.shape.channels);
    if (a.db) std::memset(a.db, 0, element_size(a.db_dtype) * a.shape.channels);
    return;
  }
  detail::dispatch_norm_types(
      a.x_dtype, a.weight_dtype, a.db_dtype,
      [&]<typename X, typename W, typename DB>() { backward<X, W, DB>(a); });
}

}  // namespace tigon::cpu
