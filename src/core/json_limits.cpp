#include "core/json_limits.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

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

namespace json_field {
namespace {

Status bad(std::string_view what, const char* key, const char* expected) {
  return error(what, key, fmt::format("must be {}", expected));
}

const nlohmann::json* find(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

bool non_negative_integer(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return true;
  return v.is_number_integer() && v.get<std::int64_t>() >= 0;
}

bool int32(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    return v.get<std::uint64_t>() <=
           static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
  }
  if (!v.is_number_integer()) return false;
  auto x = v.get<std::int64_t>();
  return x >= std::numeric_limits<std::int32_t>::min() &&
         x <= std::numeric_limits<std::int32_t>::max();
}

bool finite_float(const nlohmann::json& v) {
  if (!v.is_number()) return false;
  double x = v.get<double>();
  return std::isfinite(x) && std::fabs(x) <= static_cast<double>(std::numeric_limits<float>::max());
}

}  // namespace

Status error(std::string_view what, std::string_view key, std::string_view problem) {
  return protocol_error(fmt::format("{}: '{}' {}", what, key, problem));
}

Status object(const nlohmann::json& j, std::string_view what) {
  if (!j.is_object()) return protocol_error(fmt::format("{}: not a JSON object", what));
  return {};
}

Status id(const nlohmann::json& j, std::string_view what, const char* key, std::size_t max_bytes,
          std::string& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_string() || v->get_ref<const std::string&>().empty() ||
      v->get_ref<const std::string&>().size() > max_bytes) {
    return error(what, key, fmt::format("must be a string of 1 to {} bytes", max_bytes));
  }
  out = v->get<std::string>();
  return {};
}

Status array(const nlohmann::json& j, std::string_view what, const char* key,
             std::size_t max_entries, const nlohmann::json*& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_array()) return bad(what, key, "an array");
  if (v->size() > max_entries) {
    return error(what, key, fmt::format("has more than {} entries", max_entries));
  }
  out = v;
  return {};
}

Status u64_at_most(const nlohmann::json& j, std::string_view what, const char* key,
                   std::uint64_t max, std::uint64_t& out) {
  std::uint64_t x = 0;
  SLUICE_TRY(u64(j, what, key, x));
  if (x > max) return error(what, key, fmt::format("is {}, beyond the bound {}", x, max));
  out = x;
  return {};
}

Status string(const nlohmann::json& j, std::string_view what, const char* key, std::string& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_string()) return bad(what, key, "a string");
  out = v->get<std::string>();
  return {};
}

Status u64(const nlohmann::json& j, std::string_view what, const char* key, std::uint64_t& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !non_negative_integer(*v)) return bad(what, key, "a non-negative integer");
  out = v->get<std::uint64_t>();
  return {};
}

Status u64_array(const nlohmann::json& j, std::string_view what, const char* key,
                 std::vector<std::uint64_t>& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_array()) return bad(what, key, "an array of non-negative integers");
  out.clear();
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!non_negative_integer(e)) return bad(what, key, "an array of non-negative integers");
    out.push_back(e.get<std::uint64_t>());
  }
  return {};
}

Status i32_array(const nlohmann::json& j, std::string_view what, const char* key,
                 std::vector<std::int32_t>& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_array()) return bad(what, key, "an array of 32-bit integers");
  out.clear();
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!int32(e)) return bad(what, key, "an array of 32-bit integers");
    out.push_back(static_cast<std::int32_t>(e.get<std::int64_t>()));
  }
  return {};
}

Status f32_array(const nlohmann::json& j, std::string_view what, const char* key,
                 std::vector<float>& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_array()) return bad(what, key, "an array of finite numbers");
  out.clear();
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!finite_float(e)) return bad(what, key, "an array of finite numbers within float's range");
    out.push_back(static_cast<float>(e.get<double>()));
  }
  return {};
}

Status f64(const nlohmann::json& j, std::string_view what, const char* key, double& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_number() || !std::isfinite(v->get<double>())) {
    return bad(what, key, "a finite number");
  }
  out = v->get<double>();
  return {};
}

Status boolean(const nlohmann::json& j, std::string_view what, const char* key, bool& out) {
  const auto* v = find(j, key);
  if (v == nullptr || !v->is_boolean()) return bad(what, key, "true or false");
  out = v->get<bool>();
  return {};
}

}  // namespace json_field

}  // namespace sluice::core
