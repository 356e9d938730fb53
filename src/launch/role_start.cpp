#include "launch/role_start.hpp"

#include <cstdio>

#include "launch/role_metrics.hpp"

namespace sluice::cli {

int role_failed(const std::string& name, const core::Status& status, int code) {
  std::fprintf(stderr, "sluice %s: %s\n", name.c_str(), status.to_string().c_str());
  return code;
}

int run_role_process(const std::string& name, const std::string& metrics_listen,
                     const std::string& metrics_id,
                     const std::function<core::Result<RoleRun>(core::EventLoop&)>& create) {
  auto loop = core::EventLoop::create().value();
  loop->handle_shutdown_signals();
  auto metrics = start_role_metrics(*loop, metrics_listen, name, metrics_id);
  if (!metrics.is_ok()) return role_failed(name, metrics.status(), kExitUsage);
  auto role = create(*loop);
  if (!role.is_ok()) return role_failed(name, role.status(), kExitFailed);
  loop->on_shutdown([&](int) { role->stop(); });
  std::printf("%s\n", role->ready.c_str());
  std::fflush(stdout);
  announce_metrics(metrics->get());
  if (core::Status s = role->run(); !s.is_ok()) return role_failed(name, s, kExitFailed);
  return 0;
}

}  // namespace sluice::cli
