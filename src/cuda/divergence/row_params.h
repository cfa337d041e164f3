// What the kl_div / jsd / tvd row kernel is given: plain data, built on the host (launch.cuh) and
// passed by value.
#pragma once

#include <cstdint>

#include "math/divergence.h"

namespace tigon::cuda::divergence {

struct RowParams {
  const void* input;
  std::int64_t input_row_stride;
  const void* target;
  std::int64_t target_row_stride;
  const std::int64_t* labels;  // [rows] or null
  std::int64_t ignore_index;
  std::int64_t rows;
  std::int64_t vocab;
  std::int64_t segments;  // per row (plan.h)
  math::DivergenceOptions options;
  const float* header;  // the prepare kernel's: the denominator, then the scale at kScaleFloat
  void* grad;           // or null (forward without gradient)
  std::int64_t grad_row_stride;
  void* loss_rows;  // kNone forward: the per-element loss, else null
  std::int64_t loss_row_stride;
  const void* upstream_rows;  // kNone backward: the per-element upstream gradient, else null
  std::int64_t upstream_row_stride;
  const float* upstream;  // backward with a reduction: the one upstream element, else null
  float* segment_sums;    // forward with a reduction: [rows * segments], else null
};

}  // namespace tigon::cuda::divergence
