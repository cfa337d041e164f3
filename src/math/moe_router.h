// Softmax-then-top-k routing, per row (include/tigon/ops/moe_router.h): written once for the CPU
// and CUDA backends. A row's probabilities are recomputed from its max and 1 / sum where needed
// (no [E] scratch). exp is the activations' (src/math/activations.h).
#pragma once

#include <cstdint>

#include "math/activations.h"
#include "math/host_device.h"

namespace tigon::math {

struct RouterRow {
  float max = 0.0f;
  float inv_sum = 0.0f;  // 1 / s
};

// m = max_j x_j; s = sum_j exp(x_j - m), j increasing; x read through `at(j)` as float32.
template <typename At>
TIGON_HD RouterRow router_row(std::int64_t e, At&& at) {
  float m = at(0);
  for (std::int64_t j = 1; j < e; ++j) m = at(j) > m ? at(j) : m;
  float s = 0.0f;
  for (std::int64_t j = 0; j < e; ++j) s += act_exp(at(j) - m);
  return {m, 1.0f / s};
}

// p_j = exp(x_j - m) * (1 / s).
TIGON_HD float router_prob(float x, RouterRow row) { return act_exp(x - row.max) * row.inv_sum; }

// The K largest p_j, largest first, the lower index first among equal values.
template <typename Prob>
TIGON_HD void router_top_k(std::int64_t e, Prob&& prob, std::int64_t k, std::int64_t* ids) {
  for (std::int64_t n = 0; n < k; ++n) {
    std::int64_t best = -1;
    float best_p = 0.0f;
    for (std::int64_t j = 0; j < e; ++j) {
      bool taken = false;
      for (std::int64_t q = 0; q < n; ++q) taken = taken || ids[q] == j;
      if (taken) continue;
      const float p = prob(j);
      if (best < 0 || p > best_p) best = j, best_p = p;
    }
    ids[n] = best;
  }
}

}  // namespace tigon::math
