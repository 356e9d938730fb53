// JSON text from peers and files, parsed with bounds checked first: its size, and how deeply
// arrays and objects nest (a scan of the text, before any node is built, so that a
// 100,000-deep body costs one pass over its bytes and no recursion).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string_view>

#include "core/status.hpp"

namespace sluice::core {

struct JsonLimits {
  std::size_t max_bytes = 64u << 20;  // of the text
  std::size_t max_depth = 64;         // nested arrays and objects; the top level counts as 1
};

// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count).
// Stops counting at `stop_at` + 1. Does not check that the text is valid JSON.
std::size_t json_depth(std::string_view text, std::size_t stop_at);

// Parses `text` after checking it against `limits`; errors say which bound or what syntax.
Result<nlohmann::json> parse_json_bounded(std::string_view text, const JsonLimits& limits);

}  // namespace sluice::core
