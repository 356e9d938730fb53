#include "launch/role_metrics.hpp"

#include <cstdio>

#include "core/metrics.hpp"

namespace sluice::cli {

core::Result<std::unique_ptr<core::MetricsEndpoint>> start_role_metrics(core::EventLoop& loop,
                                                                        const std::string& listen,
                                                                        const std::string& role,
                                                                        const std::string& id) {
  core::process_metrics()
      .gauge("sluice_role_info", "which role and member this process is",
             {{"role", role}, {"id", id}})
      .set(1);
  if (listen.empty()) return std::unique_ptr<core::MetricsEndpoint>();
  auto ep = core::MetricsEndpoint::create(loop, listen, core::process_metrics());
  if (!ep.is_ok()) return ep.status().with_context("metrics_listen");
  return ep;
}

void announce_metrics(const core::MetricsEndpoint* endpoint) {
  if (endpoint == nullptr) return;
  std::printf("metrics %s\n", endpoint->url().c_str());
  std::fflush(stdout);
}

}  // namespace sluice::cli
