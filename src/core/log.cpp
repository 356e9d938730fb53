#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>

namespace sluice::core::log {
namespace {

std::atomic<Level> g_level{Level::kInfo};

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// Logs go to stderr so that commands which print results (bench tables, JSON) keep stdout clean.
spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto lg = std::make_shared<spdlog::logger>("sluice", sink);
    lg->set_pattern("%H:%M:%S.%e %^%-5l%$ [sluice] %v");
    lg->set_level(spdlog::level::trace);  // filtering happens in enabled()
    lg->flush_on(spdlog::level::trace);
    return lg;
  }();
  return *l;
}

}  // namespace

Result<Level> parse_level(std::string_view name) {
  if (name == "trace") return Level::kTrace;
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  return invalid_argument("unknown log level '" + std::string(name) +
                          "' (expected trace, debug, info, warn, error or off)");
}

std::string_view level_name(Level l) {
  switch (l) {
    case Level::kTrace:
      return "trace";
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kOff:
      return "off";
  }
  return "info";
}

void set_level(Level l) {
  g_level.store(l, std::memory_order_relaxed);
}
Level level() {
  return g_level.load(std::memory_order_relaxed);
}

void set_process_name(std::string_view name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  logger().set_pattern("%H:%M:%S.%e %^%-5l%$ [" + std::string(name) + " %P] %v");
}

bool enabled(Level l) {
  return l >= level() && l != Level::kOff;
}

void write(Level l, std::string_view message) {
  logger().log(to_spdlog(l), "{}", message);
}

}  // namespace sluice::core::log
