// Strict configuration parsing. A component's configuration is a plain struct with in-class
// defaults and a describe() member that names each field once:
//
//   struct LogConfig {
//     std::string level = "info";  // trace|debug|info|warn|error|off
//     template <typename V> void describe(V& v) {
//       v("level", level, "log level: trace, debug, info, warn, error or off");
//     }
//     Status validate() const;     // optional: checks constraints after parsing
//   };
//
// The same describe() drives parsing (unknown keys and wrong types are errors naming the JSON
// path, e.g. "relay.chain.fanout"), printing the effective configuration, and help text.
// A field of type Json (nlohmann::ordered_json) is free-form: any JSON value, taken as it is.
// Only code at the edge (the CLI, tests) includes this header; component headers that declare
// config structs need not, because describe() is a template.
//
// Thread safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/status.hpp"

namespace sluice::core::config {

using Json = nlohmann::ordered_json;

// Applies one override "a.b.c=value" to a JSON document, creating objects on the way. The value
// is taken as JSON when it parses as JSON (numbers, true/false, arrays, quoted strings) and as a
// plain string otherwise. The result is still parsed strictly, so a misspelt path is an error.
Status apply_override(Json& doc, std::string_view assignment);

// Reads a JSON file; an unreadable file or a syntax error names the file (and line).
Result<Json> read_json_file(const std::string& path);

// Parses text as JSON with a clear error naming `what` (a file name or "--set value").
Result<Json> parse_json_text(std::string_view text, std::string_view what);

// Maps namespaced environment variables to overrides: SLUICE_CFG_relay__chain__fanout=3 becomes
// "relay.chain.fanout=3" (double underscore separates levels). `environ_entries` holds "K=V"
// strings; the caller (the CLI, never library code) passes the process environment.
std::vector<std::string> overrides_from_env(const std::vector<std::string>& environ_entries);

namespace detail {

template <typename T>
concept HasValidate = requires(const T& t) {
  { t.validate() } -> std::same_as<Status>;
};

template <typename T>
struct is_vector : std::false_type {};
template <typename T, typename A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <typename T>
struct is_map : std::false_type {};
template <typename V>
struct is_map<std::map<std::string, V>> : std::true_type {};
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

inline std::string join_path(const std::string& base, std::string_view key) {
  if (base.empty()) return std::string(key);
  return base + "." + std::string(key);
}

inline std::string where(const std::string& path) {
  return path.empty() ? std::string("the top level") : "'" + path + "'";
}

std::string type_name(const Json& j);
void log_override(std::string_view assignment);

template <typename T>
Status parse_value(const Json& j, T& out, const std::string& path);

// Visitor that reads fields out of a JSON object and remembers which keys it knew.
class Reader {
 public:
  Reader(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  template <typename T>
  void operator()(std::string_view key, T& field, std::string_view /*doc*/ = {}) {
    known_.emplace_back(key);
    if (!status_.is_ok()) return;
    auto it = obj_.find(std::string(key));
    if (it == obj_.end()) return;  // keeps the in-class default
    status_ = parse_value(*it, field, join_path(path_, key));
  }

  Status finish() const {
    if (!status_.is_ok()) return status_;
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      bool found = false;
      for (const auto& k : known_)
        found = found || (k == it.key());
      if (!found) {
        std::string known;
        for (const auto& k : known_)
          known += (known.empty() ? "" : ", ") + k;
        return invalid_argument("config: unknown key '" + join_path(path_, it.key()) +
                                "' (known keys at " + where(path_) + ": " + known + ")");
      }
    }
    return {};
  }

 private:
  const Json& obj_;
  std::string path_;
  std::vector<std::string> known_;
  Status status_;
};

template <typename T>
Status parse_value(const Json& j, T& out, const std::string& path) {
  auto wrong = [&](std::string_view expected) {
    return invalid_argument("config: " + where(path) + " must be " + std::string(expected) +
                            ", got " + type_name(j));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return wrong("a boolean");
    out = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer()) return wrong("an integer");
    if (j.is_number_unsigned()) {
      auto v = j.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
        return invalid_argument("config: " + where(path) + " is out of range");
      out = static_cast<T>(v);
    } else {
      auto v = j.get<std::int64_t>();
      if constexpr (std::is_unsigned_v<T>) {
        if (v < 0) return wrong("a non-negative integer");
      }
      if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          (v > 0 && static_cast<std::uint64_t>(v) >
                        static_cast<std::uint64_t>(std::numeric_limits<T>::max())))
        return invalid_argument("config: " + where(path) + " is out of range");
      out = static_cast<T>(v);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) return wrong("a number");
    out = j.get<T>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) return wrong("a string");
    out = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, Json>) {
    out = j;  // free-form: passed through as it is (a command role's options)
  } else if constexpr (is_optional<T>::value) {
    if (j.is_null()) {
      out.reset();
    } else {
      typename T::value_type v{};
      if (out) v = *out;
      SLUICE_TRY(parse_value(j, v, path));
      out = std::move(v);
    }
  } else if constexpr (is_vector<T>::value) {
    if (!j.is_array()) return wrong("an array");
    T v;
    v.resize(j.size());
    for (std::size_t i = 0; i < j.size(); ++i) {
      SLUICE_TRY(parse_value(j[i], v[i], path + "[" + std::to_string(i) + "]"));
    }
    out = std::move(v);
  } else if constexpr (is_map<T>::value) {
    if (!j.is_object()) return wrong("an object");
    T m;
    for (auto it = j.begin(); it != j.end(); ++it) {
      typename T::mapped_type v{};
      SLUICE_TRY(parse_value(it.value(), v, join_path(path, it.key())));
      m.emplace(it.key(), std::move(v));
    }
    out = std::move(m);
  } else {
    if (!j.is_object()) return wrong("an object");
    Reader r(j, path);
    out.describe(r);
    SLUICE_TRY(r.finish());
    if constexpr (HasValidate<T>) {
      Status s = out.validate();
      if (!s.is_ok()) return s.with_context("config: " + where(path));
    }
  }
  return {};
}

template <typename T>
Json to_json_value(const T& v);

class Writer {
 public:
  explicit Writer(Json& out) : out_(out) {}
  template <typename T>
  void operator()(std::string_view key, const T& field, std::string_view /*doc*/ = {}) {
    out_[std::string(key)] = to_json_value(field);
  }

 private:
  Json& out_;
};

template <typename T>
Json to_json_value(const T& v) {
  if constexpr (std::is_same_v<T, bool> || std::is_arithmetic_v<T> ||
                std::is_same_v<T, std::string>) {
    return Json(v);
  } else if constexpr (std::is_same_v<T, Json>) {
    return v;
  } else if constexpr (is_optional<T>::value) {
    return v ? to_json_value(*v) : Json(nullptr);
  } else if constexpr (is_vector<T>::value) {
    Json a = Json::array();
    for (const auto& e : v)
      a.push_back(to_json_value(e));
    return a;
  } else if constexpr (is_map<T>::value) {
    Json o = Json::object();
    for (const auto& [k, e] : v)
      o[k] = to_json_value(e);
    return o;
  } else {
    Json o = Json::object();
    Writer w(o);
    // describe() is non-const because parsing writes through it; printing only reads.
    const_cast<T&>(v).describe(w);
    return o;
  }
}

}  // namespace detail

// Parses `doc` strictly into `out` (which holds the defaults on entry).
template <typename T>
Status parse(const Json& doc, T& out) {
  return detail::parse_value(doc, out, "");
}

// The effective configuration as JSON, every field included.
template <typename T>
Json to_json(const T& cfg) {
  return detail::to_json_value(cfg);
}

// Loads a configuration: defaults, then the file (if path is non-empty), then the overrides in
// order. Each applied override is logged.
template <typename T>
Result<T> load(const std::string& path, const std::vector<std::string>& overrides) {
  Json doc = Json::object();
  if (!path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(doc, read_json_file(path));
  }
  for (const auto& o : overrides) {
    SLUICE_TRY(apply_override(doc, o));
    detail::log_override(o);
  }
  T cfg{};
  Status s = parse(doc, cfg);
  if (!s.is_ok()) return path.empty() ? s : s.with_context(path);
  return cfg;
}

}  // namespace sluice::core::config
