#include "core/json_limits.hpp"

#include <fmt/format.h>

namespace sluice::core {

std::size_t json_depth(std::string_view text, std::size_t stop_at) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > stop_at) return deepest;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

Result<nlohmann::json> parse_json_bounded(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    return invalid_argument(
        fmt::format("JSON of {} bytes exceeds the limit of {}", text.size(), limits.max_bytes));
  }
  if (json_depth(text, limits.max_depth) > limits.max_depth) {
    return invalid_argument(
        fmt::format("JSON nested deeper than the limit of {} levels", limits.max_depth));
  }
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("malformed JSON");
  return j;
}

}  // namespace sluice::core
