// A role's file, {"log_level": ..., "metrics_listen": ..., "<section>": {...}}, and its loading,
// shared by every role subcommand (commands.cpp, fleet_roles.cpp): read with the overrides,
// printed as the effective configuration, and the log level applied.
//
// Thread safety: the loading sets the process's log level; call it from main's thread.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "launch/commands.hpp"
#include "launch/role_metrics.hpp"

namespace sluice::cli {

template <typename T, const char* kSection>
struct RoleFile {
  std::string log_level = "info";
  std::string metrics_listen;
  T section;
  template <typename V>
  void describe(V& v) {
    v("log_level", log_level, "log level: trace, debug, info, warn, error or off");
    v("metrics_listen", metrics_listen, kMetricsListenHelp);
    v(kSection, section, "the role's settings");
  }
  core::Status validate() const { return core::log::parse_level(log_level).status(); }
};

// Loads the role's file; `complete` (when given) fills in the section's defaults that depend on
// the process (an id from the pid) before the effective configuration is printed. With
// --print-config only that is printed and `*printed` set; otherwise it is logged and the log
// level applied.
template <typename T, const char* kSection>
core::Result<RoleFile<T, kSection>> load_role(const RoleArgs& args,
                                              const std::vector<std::string>& overrides,
                                              bool* printed,
                                              const std::function<void(T&)>& complete = {}) {
  auto cfg = core::config::load<RoleFile<T, kSection>>(args.config_path, overrides);
  if (!cfg.is_ok()) return cfg.status();
  if (complete) complete(cfg->section);
  std::string effective = core::config::to_json(*cfg).dump(2);
  if (args.print_config_only) {
    std::printf("%s\n", effective.c_str());
    *printed = true;
    return cfg;
  }
  core::log::set_level(core::log::parse_level(cfg->log_level).value());
  core::log::info("effective configuration:\n{}", effective);
  return cfg;
}

}  // namespace sluice::cli
