// TIGON_CROSS_ENTROPY_TUNING (slice_plan.h): the developer's override of the slice plan.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "core/env_options.h"
#include "cuda/cross_entropy/slice_plan.h"

namespace tigon::cuda::cross_entropy {
namespace {

constexpr std::string_view kVariable = "TIGON_CROSS_ENTROPY_TUNING";

void set(std::string_view variable, SliceTuning& t, std::string_view key, std::int64_t v) {
  const auto reject = [&](std::string_view expected) {
    detail::throw_argument_error(variable, key, expected, std::to_string(v));
  };
  if (key == "slices") {
    t.slices = v != 0;
  } else if (key == "max_cluster" || key == "row_above") {
    if (v != 1 && v != 2 && v != 4 && v != 8) reject("1, 2, 4 or 8");
    (key == "max_cluster" ? t.max_cluster : t.row_kernel_above_cluster) = static_cast<int>(v);
  } else if (key == "slice_kb") {
    if (v < 1 || static_cast<std::size_t>(v) * 1024 > kMaxSliceBytes) reject("1 to 100");
    t.slice_bytes = static_cast<std::size_t>(v) * 1024;
  } else if (key == "stages") {
    if (v != 1 && v != 2) reject("1 or 2");
    t.stages = static_cast<int>(v);
  } else if (bool* flag = key == "l2_hints"           ? &t.l2_hints
                          : key == "reverse"          ? &t.reverse_second_pass
                          : key == "dependent"        ? &t.dependent_launches
                          : key == "cluster_exchange" ? &t.cluster_exchange
                                                      : nullptr) {
    if (v != 0 && v != 1) reject("0 or 1");
    *flag = v != 0;
  } else {
    detail::throw_argument_error(variable, key,
                                 "slices, max_cluster, row_above, slice_kb, stages, l2_hints, "
                                 "reverse, dependent or cluster_exchange",
                                 "an unknown key");
  }
}

}  // namespace

SliceTuning slice_tuning_from_environment(std::string_view variable) {
  return detail::options_from_environment<SliceTuning>(
      variable, [variable](SliceTuning& t, std::string_view key, std::int64_t v) {
        set(variable, t, key, v);
      });
}

const SliceTuning& slice_tuning() {
  static const SliceTuning t = slice_tuning_from_environment(kVariable);
  return t;
}

}  // namespace tigon::cuda::cross_entropy
