// `sluice publish` and `sluice pull`: move a safetensors checkpoint through a running weight
// store, byte for byte.
//
// Thread safety: main's thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/job_config.hpp"

namespace sluice::cli {

struct PublishArgs {
  std::string store = "tcp://127.0.0.1:5550";
  std::string safetensors;
  std::string model = "policy";
  std::uint64_t version = 1;
  std::string chunk = "8MiB";
  std::string holder_id;  // default: publish-<pid>
  std::string listen = "tcp://127.0.0.1:*";
  AuthArgs auth{"", "actor", false};  // publishing is the actor's: it acts as the job's actor
};

struct PullArgs {
  std::string store = "tcp://127.0.0.1:5550";
  std::string model = "policy";
  std::uint64_t version = 0;  // 0: latest
  std::string out;
  int timeout_ms = 120000;
  AuthArgs auth{"", "operator", false};
};

int run_publish(const PublishArgs& args, const std::vector<std::string>& env);
int run_pull(const PullArgs& args, const std::vector<std::string>& env);

}  // namespace sluice::cli
