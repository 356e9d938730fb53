// JSON text from peers and files, parsed with bounds checked first: its size, and how deeply
// arrays and objects nest (a scan of the text, before any node is built, so that a
// 100,000-deep body costs one pass over its bytes and no recursion).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// Strict readers of one field of a JSON object, for decoders of peer input: the one decoding
// style of every message (the store's, the manager's). A missing field, a wrong type or a value
// outside the C++ type's range is a protocol error "<what>: '<key>' must be ..." - never an
// exception and never a conversion with undefined behaviour (nlohmann's get<std::uint64_t>() of
// -1.0, or get<float>() of 1e300, is one). An optional field is read only when present
// (`if (j.contains(key))`); it keeps its default otherwise.
namespace json_field {
// The error of every decoder: protocol error "<what>: '<key>' <problem>" (the key may name an
// entry, "finished[2]").
Status error(std::string_view what, std::string_view key, std::string_view problem);
// `j` itself must be an object: protocol error "<what>: not a JSON object".
Status object(const nlohmann::json& j, std::string_view what);
// An id: a string of 1 to `max_bytes` bytes.
Status id(const nlohmann::json& j, std::string_view what, const char* key, std::size_t max_bytes,
          std::string& out);
// An array of at most `max_entries` entries, its size checked before any entry is read.
Status array(const nlohmann::json& j, std::string_view what, const char* key,
             std::size_t max_entries, const nlohmann::json*& out);
// A non-negative integer of at most `max`.
Status u64_at_most(const nlohmann::json& j, std::string_view what, const char* key,
                   std::uint64_t max, std::uint64_t& out);
Status string(const nlohmann::json& j, std::string_view what, const char* key, std::string& out);
Status u64(const nlohmann::json& j, std::string_view what, const char* key, std::uint64_t& out);
Status u64_array(const nlohmann::json& j, std::string_view what, const char* key,
                 std::vector<std::uint64_t>& out);
Status i32_array(const nlohmann::json& j, std::string_view what, const char* key,
                 std::vector<std::int32_t>& out);
// Finite, and within float's range.
Status f32_array(const nlohmann::json& j, std::string_view what, const char* key,
                 std::vector<float>& out);
// Finite.
Status f64(const nlohmann::json& j, std::string_view what, const char* key, double& out);
Status boolean(const nlohmann::json& j, std::string_view what, const char* key, bool& out);

// The array at `key` (checked as array() checks it) into `out`, cleared first, one entry at a
// time: `read(entry, index, value)` checks one entry and fills a T, or returns the error, which
// names the key or the entry (error(what, "finished[2]", ...)). The first error stops the read.
template <typename T, typename Read>
Status list(const nlohmann::json& j, std::string_view what, const char* key,
            std::size_t max_entries, std::vector<T>& out, Read read) {
  const nlohmann::json* l = nullptr;
  SLUICE_TRY(array(j, what, key, max_entries, l));
  out.clear();
  out.reserve(l->size());
  for (std::size_t i = 0; i < l->size(); ++i) {
    T value{};
    SLUICE_TRY(read((*l)[i], i, value));
    out.push_back(std::move(value));
  }
  return {};
}
}  // namespace json_field

}  // namespace sluice::core
