// Row parallelism for the CPU backend: OpenMP when available, a plain loop otherwise.
// Work items are independent, so the result never depends on the thread count.
#pragma once

#include <cstdint>

namespace tigon::cpu {

// Calls body(i) for i in [0, n), in parallel when the total work (n * cost) is worth threads.
template <typename Body>
void parallel_for(std::int64_t n, std::int64_t cost_per_item, Body&& body) {
  [[maybe_unused]] const bool parallel = n > 1 && n * cost_per_item >= (1 << 15);
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (parallel)
#endif
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace tigon::cpu
