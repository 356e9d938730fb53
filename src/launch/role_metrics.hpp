// Every role's /metrics endpoint: the `metrics_listen` setting of a role file, the endpoint on the
// role's loop, and the stdout line "metrics <url>" that tells the launcher where it is (printed
// after the role's ready line, which must stay its first).
#pragma once

#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "wire/metrics_http.hpp"

namespace sluice::cli {

inline constexpr char kMetricsListenHelp[] =
    "HOST:PORT where GET /metrics serves the role's metrics as Prometheus text (port 0: any "
    "free one; empty: none; default empty, `sluice run` sets 127.0.0.1:0)";

// Starts the endpoint when `listen` is set (nullptr otherwise) and marks the process with
// sluice_role_info{role, id} 1. Errors name the setting.
core::Result<std::unique_ptr<core::MetricsEndpoint>> start_role_metrics(core::EventLoop& loop,
                                                                        const std::string& listen,
                                                                        const std::string& role,
                                                                        const std::string& id);

// Prints "metrics <url>" on stdout (nothing for nullptr).
void announce_metrics(const core::MetricsEndpoint* endpoint);

}  // namespace sluice::cli
