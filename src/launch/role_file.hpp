// A role's file, {"log_level": ..., "metrics_listen": ..., "<section>": {...}}, through one field
// table (RoleFile): read by every role subcommand (load_role: with the overrides, printed as the
// effective configuration, the log level applied) and written by every launcher (role_file,
// write_role_file), so that what a launcher writes is what the role reads.
//
// Thread safety: load_role sets the process's log level; call it from main's thread. The writers
// share no state.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "launch/job_config.hpp"
#include "launch/role_metrics.hpp"

namespace sluice::cli {

// `sluice ROLE --config FILE [--set a.b=c]... [--print-config]`.
struct RoleArgs {
  std::string role;
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config_only = false;
};

// The role's section in its file.
inline constexpr char kStoreSection[] = "store";
inline constexpr char kRelaySection[] = "relay";
inline constexpr char kManagerSection[] = "manager";
inline constexpr char kRolloutSection[] = "rollout";
inline constexpr char kActorSection[] = "actor";

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

// A role's file as a launcher writes it: the job's log level and metrics address, and `cfg` as
// the section. A command role's file has the command's `options` besides, passed through as given
// (RoleCommand; the built-in roles take none, so RoleFile has no such field). Object keys are
// sorted, as nlohmann::json keeps them.
template <const char* kSection, typename T>
nlohmann::json role_file(const JobConfig& job, const T& cfg, const RoleCommand* command = nullptr) {
  const RoleFile<T, kSection> file{job.log_level, job.metrics_listen, cfg};
  nlohmann::json doc = nlohmann::json::parse(core::config::to_json(file).dump());
  if (command && command->enabled()) {
    doc["options"] = nlohmann::json::parse(command->options.dump());
  }
  return doc;
}

// Writes `doc` to `path` (indented, one trailing newline), mode 0600 from its creation.
core::Status write_json_file(const std::filesystem::path& path, const nlohmann::json& doc);

template <const char* kSection, typename T>
core::Status write_role_file(const std::filesystem::path& path, const JobConfig& job, const T& cfg,
                             const RoleCommand* command = nullptr) {
  return write_json_file(path, role_file<kSection>(job, cfg, command));
}

}  // namespace sluice::cli
