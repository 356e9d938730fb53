// The logging facade. One backend (spdlog) sits behind it; nothing else in sluice includes
// spdlog. Messages are lowercase and name the object they are about:
//   log::warn("relay {}: chunk {} from {} failed: {}", id, chunk, peer, status.to_string());
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "core/status.hpp"

namespace sluice::core::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Parses "trace", "debug", "info", "warn", "error", "off".
Result<Level> parse_level(std::string_view name);
std::string_view level_name(Level level);

// Sets the process-wide level and the name that prefixes every line (the role, e.g. "relay").
void set_level(Level level);
Level level();
void set_process_name(std::string_view name);

bool enabled(Level level);
void write(Level level, std::string_view message);

template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kTrace)) write(Level::kTrace, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::kError)) write(Level::kError, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sluice::core::log
