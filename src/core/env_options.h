// Developer overrides from an environment variable "key=value,key=value" of non-negative
// integers (e.g. TIGON_RMS_NORM_TUNING), read by the caller once per process. A malformed value
// is an error naming the variable, never silently ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace tigon::detail {

// Calls set(key, value) for each item of the variable's value, in order (nothing if unset);
// set rejects unknown keys and out-of-range values with throw_argument_error(variable, key, ...).
void for_each_env_option(std::string_view variable,
                         const std::function<void(std::string_view, std::int64_t)>& set);

// A default T with the variable's options applied in order by set(t, key, value).
template <typename T, typename Set>
T options_from_environment(std::string_view variable, Set&& set) {
  T t;
  for_each_env_option(variable, [&](std::string_view key, std::int64_t v) { set(t, key, v); });
  return t;
}

}  // namespace tigon::detail
