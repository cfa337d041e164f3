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

}  // namespace tigon::detail
