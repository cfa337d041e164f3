// GroupNorm formulas: LayerNorm's (math/layer_norm.h), a row being one (sample, group) of
// L = (C / G) * S elements and each element taking its channel's weight and bias. The backward's
// row sums are formed from per-channel sums, as the header says (include/tigon/ops/group_norm.h,
// docs/ops/group_norm.md). Compiled by g++ and nvcc.
#pragma once

#include "math/layer_norm.h"

namespace tigon::math {

template <typename X, typename W, typename B>
struct GroupNorm : LayerNorm<X, W, B> {
  // c1 or c2 of the backward: sum over the group's channels of w[c] * (channel sum), over L.
  TIGON_HD static float weighted_channel_term(float w, float channel_sum) {
    return w * channel_sum;
  }
  TIGON_HD static float row_mean(float sum, std::int64_t group_size) {
    return sum / static_cast<float>(group_size);
  }
};

}  // namespace tigon::math
