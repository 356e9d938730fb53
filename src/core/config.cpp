#include "core/config.hpp"

#include <fstream>
#include <sstream>

#include "core/log.hpp"

namespace sluice::core::config {

namespace detail {

std::string type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number with a fraction";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

void log_override(std::string_view assignment) {
  log::info("config: override {}", assignment);
}

}  // namespace detail

Result<Json> parse_json_text(std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return invalid_argument(std::string(what) + ": not valid JSON: " + e.what());
  }
}

Result<Json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open config file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return invalid_argument("cannot read config file '" + path + "'");
  SLUICE_ASSIGN_OR_RETURN(Json j, parse_json_text(ss.str(), path));
  if (!j.is_object()) return invalid_argument(path + ": the top level must be a JSON object");
  return j;
}

Status apply_override(Json& doc, std::string_view assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return invalid_argument("override '" + std::string(assignment) +
                            "' must look like key.path=value");
  }
  std::string_view path = assignment.substr(0, eq);
  std::string_view text = assignment.substr(eq + 1);

  Json value;
  try {
    value = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error&) {
    value = std::string(text);  // a bare word is a string: --set log.level=debug
  }

  Json* node = &doc;
  std::size_t start = 0;
  while (true) {
    auto dot = path.find('.', start);
    std::string key(
        path.substr(start, dot == std::string_view::npos ? path.size() - start : dot - start));
    if (key.empty()) {
      return invalid_argument("override '" + std::string(assignment) + "' has an empty key");
    }
    if (!node->is_object()) {
      return invalid_argument("override '" + std::string(assignment) + "': '" +
                              std::string(path.substr(0, start ? start - 1 : 0)) +
                              "' is not an object");
    }
    if (dot == std::string_view::npos) {
      (*node)[key] = std::move(value);
      return {};
    }
    Json& child = (*node)[key];
    if (child.is_null()) child = Json::object();
    node = &child;
    start = dot + 1;
  }
}

std::vector<std::string> overrides_from_env(const std::vector<std::string>& environ_entries) {
  static constexpr std::string_view kPrefix = "SLUICE_CFG_";
  std::vector<std::string> out;
  for (const auto& e : environ_entries) {
    if (e.rfind(kPrefix, 0) != 0) continue;
    auto eq = e.find('=');
    if (eq == std::string::npos) continue;
    std::string key = e.substr(kPrefix.size(), eq - kPrefix.size());
    std::string path;
    for (std::size_t i = 0; i < key.size(); ++i) {
      if (key[i] == '_' && i + 1 < key.size() && key[i + 1] == '_') {
        path += '.';
        ++i;
      } else {
        path += key[i];
      }
    }
    out.push_back(path + "=" + e.substr(eq + 1));
  }
  return out;
}

}  // namespace sluice::core::config
