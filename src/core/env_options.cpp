#include "core/env_options.h"

#include <charconv>
#include <cstdlib>
#include <string>

#include "core/check.h"

namespace tigon::detail {
namespace {

std::int64_t parse_int(std::string_view variable, std::string_view key, std::string_view value) {
  std::int64_t v = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (error != std::errc{} || end != value.data() + value.size() || v < 0) {
    throw_argument_error(variable, key, "a non-negative integer", std::string(value));
  }
  return v;
}

}  // namespace

void for_each_env_option(std::string_view variable,
                         const std::function<void(std::string_view, std::int64_t)>& set) {
  const std::string name(variable);
  const char* env = std::getenv(name.c_str());
  if (env == nullptr) return;
  std::string_view rest(env);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (item.empty()) continue;
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw_argument_error(variable, item, "key=value", "no '='");
    const std::string_view key = item.substr(0, eq);
    set(key, parse_int(variable, key, item.substr(eq + 1)));
  }
}

}  // namespace tigon::detail
