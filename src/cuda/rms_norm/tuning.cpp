// TIGON_RMS_NORM_TUNING: a developer's override of the launch choices in layout.cuh for one
// process (tools/tune_rms_norm.py sweeps them). Read once; a malformed value is an error, never
// silently ignored.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "core/env_options.h"
#include "cuda/rms_norm/layout.cuh"

namespace tigon::cuda::rms_norm {
namespace {

constexpr std::string_view kVariable = "TIGON_RMS_NORM_TUNING";

// The on/off key `key` of `t` (taking 0 or 1), or nullptr for any other key.
bool* switch_of(Tuning& t, std::string_view key) {
  if (key == "clusters") return &t.clusters;
  if (key == "cluster_exchange") return &t.cluster_exchange;
  if (key == "fwd_two_pass_l2_hints") return &t.fwd_two_pass_l2_hints;
  return nullptr;
}

// The key `key` of `t` that takes any non-negative count (the parser rejects negatives), or
// nullptr for any other key.
std::int64_t* count_of(Tuning& t, std::string_view key) {
  if (key == "fwd_two_pass_min_hidden") return &t.fwd_two_pass_min_hidden;
  if (key == "fwd_two_pass_max_row_bytes") return &t.fwd_two_pass_max_row_bytes;
  if (key == "fwd_two_pass_unroll2_max_row_bytes") return &t.fwd_two_pass_unroll2_max_row_bytes;
  if (key == "fast_memory_gbps") return &t.fast_memory_gbps;
  if (key == "bwd_two_pass_min_hidden") return &t.bwd_two_pass_min_hidden;
  if (key == "max_dw_groups") return &t.max_dw_groups;
  if (key == "max_dw_partial_bytes") return &t.max_dw_partial_bytes;
  if (key == "min_dw_groups") return &t.min_dw_groups;
  if (key == "min_rows_per_dw_group") return &t.min_rows_per_dw_group;
  if (key == "min_elements_per_dw_group") return &t.min_elements_per_dw_group;
  if (key == "finish_vector_min_hidden") return &t.finish_vector_min_hidden;
  return nullptr;
}

void set(std::string_view variable, Tuning& t, std::string_view key, std::int64_t v) {
  // Throws an Error naming the key, what it takes and the value given, unless `ok`.
  const auto require = [&](bool ok, std::string_view expected) {
    if (!ok) detail::throw_argument_error(variable, key, expected, std::to_string(v));
  };
  if (bool* on = switch_of(t, key)) {
    require(v == 0 || v == 1, "0 or 1");
    *on = v == 1;
  } else if (std::int64_t* count = count_of(t, key)) {
    *count = v;
  } else if (key == "fwd_block_threads") {
    t.fwd_block_threads = static_cast<int>(v);
  } else if (key == "bwd_block_threads") {
    t.bwd_block_threads = static_cast<int>(v);
  } else if (key == "cluster_slice_threads") {
    t.cluster_slice_threads = static_cast<int>(v);
  } else if (key == "fwd_cluster_slice_threads" || key == "bwd_cluster_slice_threads") {
    require(v == 0 || (v >= 32 && v <= kMaxRowThreads), "0 or 32 to 512");
    (key == "fwd_cluster_slice_threads" ? t.fwd_cluster_slice_threads
                                        : t.bwd_cluster_slice_threads) = static_cast<int>(v);
  } else if (key == "bwd_cluster_slice_above") {
    require(v >= 1 && v <= kMaxClusterSize, "1 to 8");
    t.bwd_cluster_slice_above = static_cast<int>(v);
  } else if (key == "fwd_min_row_threads") {
    t.fwd_min_row_threads = static_cast<int>(v);
  } else if (key == "bwd_min_row_threads") {
    t.bwd_min_row_threads = static_cast<int>(v);
  } else if (key == "fwd_light_max_row_threads") {
    t.fwd_light_max_row_threads = static_cast<int>(v);
  } else if (key == "fwd_light_packs_per_thread") {
    require(v == 2 || v == 4, "2 or 4");
    t.fwd_light_packs_per_thread = static_cast<int>(v);
  } else if (key == "finish_columns") {
    require(v == 0 || v == 8 || v == 16 || v == 32, "0, 8, 16 or 32");
    t.finish_columns = static_cast<int>(v);
  } else if (key == "fwd_prefetch") {
    require(v >= 0 && v <= 2, "0, 1 (rows over clusters) or 2 (all rows)");
    t.fwd_prefetch = static_cast<int>(v);
  } else if (key == "bwd_prefetch") {
    require(v >= 0 && v <= 2, "0, 1 (all rows) or 2 (rows over clusters)");
    t.bwd_prefetch = static_cast<int>(v);
  } else if (key == "fwd_two_pass_unroll") {
    require(v == 0 || v == 2 || v == 4, "0 (by row length), 2 or 4");
    t.fwd_two_pass_unroll = static_cast<int>(v);
  } else if (key == "fwd_two_pass_threads") {
    require(v == kTwoPassThreads || v == 1024, "512 or 1024");
    t.fwd_two_pass_threads = static_cast<int>(v);
  } else if (key == "fwd_light_max_row_threads_fast_memory") {
    require(v <= kMaxRowThreads, "0 to 512");
    t.fwd_light_max_row_threads_fast_memory = static_cast<int>(v);
  } else if (key == "dw_wave_sms") {
    require(v >= 0 && v <= 4096, "0 (off) or a number of SMs up to 4096");
    t.dw_wave_sms = static_cast<int>(v);
  } else if (key == "fwd_stages" || key == "bwd_stages") {
    require(v == 0 || (v >= 2 && v <= 8), "0 or 2 to 8");
    (key == "fwd_stages" ? t.fwd_stages : t.bwd_stages) = static_cast<int>(v);
  } else {
    detail::throw_argument_error(variable, key, "a key of struct Tuning (layout.cuh)",
                                 "an unknown key");
  }
  require(t.fwd_block_threads >= 1 && t.bwd_block_threads >= 1 && t.cluster_slice_threads >= 32 &&
              t.fwd_min_row_threads >= 1 && t.bwd_min_row_threads >= 1 && t.max_dw_groups >= 1 &&
              t.max_dw_partial_bytes >= 0 && t.min_dw_groups >= 1 && t.min_rows_per_dw_group >= 1,
          "a value that keeps every count positive");
}

}  // namespace

Tuning tuning_from_environment(std::string_view variable) {
  return detail::options_from_environment<Tuning>(
      variable,
      [variable](Tuning& t, std::string_view key, std::int64_t v) { set(variable, t, key, v); });
}

const Tuning& tuning() {
  static const Tuning t = tuning_from_environment(kVariable);
  return t;
}

}  // namespace tigon::cuda::rms_norm
