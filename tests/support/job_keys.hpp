// A job's keys for tests: sluice keys' layout in a fresh temporary folder (removed at the end),
// with each identity's SecurityConfig and loaded Security at hand. Also a second, unrelated set
// of keys: an outsider whose key is in no members file of this job.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "wire/security.hpp"

namespace sluice::testing {

struct JobKeys {
  std::string dir;
  explicit JobKeys(std::vector<std::pair<std::string, std::string>> identities = {
                       {"weightstore", core::kRoleWeightstore},
                       {"rollout-manager", core::kRoleManager},
                       {"actor", core::kRoleActor},
                       {"relay-0", core::kRoleRelay},
                       {"rollout-0", core::kRoleRollout},
                       {"rollout-1", core::kRoleRollout},
                       {"operator", core::kRoleOperator}}) {
    static std::atomic<int> n{0};
    dir = (std::filesystem::temp_directory_path() /
           ("sluice-keys-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
              .string();
    auto made = core::make_job_keys(dir, identities);
    REQUIRE_MESSAGE(made.is_ok(), made.status().to_string());
  }
  ~JobKeys() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  JobKeys(const JobKeys&) = delete;
  JobKeys& operator=(const JobKeys&) = delete;

  core::SecurityConfig config(const std::string& identity) const {
    core::SecurityConfig c;
    c.key_file = core::key_file_path(dir, identity);
    c.members_file = core::members_file_path(dir);
    return c;
  }
  core::Security security(const std::string& identity) const {
    auto s = core::load_security(config(identity), "test " + identity);
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    return std::move(s).value();
  }
  // `identity`'s security as a client of the member with `server_role`.
  core::Security client_of(const std::string& identity, const std::string& server_role) const {
    auto s = security(identity).for_server(server_role);
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    return std::move(s).value();
  }
};

// A request that a server never answered because the handshake failed: it times out, or, once
// ZeroMQ has dropped the failed connection and the client has no peer left, it cannot even be
// queued (unavailable). Either way no reply came back.
template <class R>
bool never_answered(const R& r) {
  return !r.is_ok() && (r.status().code() == core::Code::kTimeout ||
                        r.status().code() == core::Code::kUnavailable);
}

}  // namespace sluice::testing
