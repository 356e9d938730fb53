#include "launch/commands.hpp"

#include <cstdio>

#include "analysis/compare.hpp"
#include "core/event_loop.hpp"
#include "launch/executable.hpp"
#include "launch/job.hpp"
#include "launch/job_setup.hpp"
#include "wire/messaging.hpp"

namespace sluice::cli {

namespace {

// Prints what a finished job did (sluice run, sluice run --resume).
int print_job_result(const JobConfig& job, const core::Result<JobResult>& r) {
  if (!r.is_ok()) {
    std::fprintf(stderr, "sluice run: %s\n", r.status().to_string().c_str());
    return 1;
  }
  const auto& a = r->actor;
  const auto& m = r->manager;
  std::printf(
      "job %s (%s) done in %.1f s: %llu steps, %llu trained tokens (%.0f tokens/s), "
      "staleness mean %.2f max %llu, %llu duplicates refused, %llu repack moves\n",
      job.name.c_str(), m.value("mode", std::string()).c_str(), a.value("wall_s", 0.0),
      static_cast<unsigned long long>(a.value("steps", 0ull)),
      static_cast<unsigned long long>(a.value("trained_tokens", 0ull)),
      a.value("tokens_per_s", 0.0), a.value("staleness_mean", 0.0),
      static_cast<unsigned long long>(a.value("staleness_max", 0ull)),
      static_cast<unsigned long long>(a.value("duplicates", 0ull)),
      static_cast<unsigned long long>(m.value("repack_moves", 0ull)));
  for (const auto& [name, rs] : r->restarts.items()) {
    std::printf("restarted: %s %llu times\n", name.c_str(),
                static_cast<unsigned long long>(rs.value("restarts", 0ull)));
  }
  for (const auto& e : r->events)
    std::printf("event: %s\n", e.c_str());
  double before = a.value("initial_accuracy", -1.0), after = a.value("final_accuracy", -1.0);
  if (before >= 0 && after >= 0) {
    std::printf(
        "held-out accuracy (prompts never trained on): %.1f%% after the warm start, "
        "%.1f%% at the end (%+.1f points)\n",
        100 * before, 100 * after, 100 * (after - before));
    std::fputs(format_by_terms(a.value("initial_accuracy_by_terms", nlohmann::json()).dump(),
                               a.value("final_accuracy_by_terms", nlohmann::json()).dump())
                   .c_str(),
               stdout);
  }
  std::printf("run folder: %s (report.html, metrics.jsonl, final_weights.safetensors)\n",
              r->dir.c_str());
  return 0;
}

}  // namespace

int run_job(const std::string& job_path, const std::vector<std::string>& overrides,
            const std::string& out_dir, const std::vector<std::string>& environment) {
  auto job = load_job_file(job_path, overrides);
  if (job.is_ok()) {
    if (!out_dir.empty()) job->out_dir = out_dir;
    core::Status v = job->validate();
    if (!v.is_ok()) job = v.with_context(job_path);
  }
  if (!job.is_ok()) {
    std::fprintf(stderr, "sluice run: %s\n", job.status().to_string().c_str());
    return 2;
  }
  return print_job_result(*job, run_local_job(*job, self_exe(), environment));
}

int resume_job(const std::string& run_dir, const std::vector<std::string>& environment) {
  auto job = load_run_job(run_dir);
  if (!job.is_ok()) {
    std::fprintf(stderr, "sluice run --resume: %s\n", job.status().to_string().c_str());
    return 2;
  }
  std::fprintf(stderr, "sluice run: resuming %s from %s\n", job->name.c_str(), run_dir.c_str());
  return print_job_result(*job, run_local_job(*job, self_exe(), environment, nullptr, true));
}

int run_keys(const KeysArgs& args) {
  auto members = core::make_job_keys(args.dir, job_identities(args.relays, args.rollouts));
  if (!members.is_ok()) {
    std::fprintf(stderr, "sluice keys: %s\n", members.status().to_string().c_str());
    return 1;
  }
  for (const auto& m : members->all()) {
    std::printf("%-16s %-16s %s\n", m.identity.c_str(), m.role.c_str(),
                core::key_file_path(args.dir, m.identity).c_str());
  }
  std::printf("members (the allow-list): %s\n", core::members_file_path(args.dir).c_str());
  return 0;
}

int run_ping(const PingArgs& args) {
  auto loop = core::EventLoop::create();
  if (!loop.is_ok()) {
    std::fprintf(stderr, "sluice ping: %s\n", loop.status().to_string().c_str());
    return 1;
  }
  auto security = tool_security(args.auth, "ping");
  if (security.is_ok() && security->curve()) {
    const core::Member* peer = security->members->by_identity(args.peer);
    if (!peer) {
      security = core::invalid_argument("--peer " + args.peer + " is not a member of the job");
    } else {
      security->server_key = peer->public_key;
    }
  }
  if (!security.is_ok()) {
    std::fprintf(stderr, "sluice ping: %s\n", security.status().to_string().c_str());
    return 2;
  }
  auto client = core::Client::create(**loop, args.endpoint, *security);
  if (!client.is_ok()) {
    std::fprintf(stderr, "sluice ping: %s\n", client.status().to_string().c_str());
    return 2;
  }
  int failures = 0;
  for (int i = 0; i < args.count; ++i) {
    auto t0 = core::Clock::now();
    auto reply = (*client)->ping(core::Millis(args.timeout_ms));
    double ms = std::chrono::duration<double, std::milli>(core::Clock::now() - t0).count();
    if (!reply.is_ok()) {
      std::printf("ping %s: %s\n", args.endpoint.c_str(), reply.status().to_string().c_str());
      ++failures;
      continue;
    }
    std::printf("pong from %s: pid %d, protocol %d, %.3f ms\n", args.endpoint.c_str(),
                reply->body.value("pid", 0), reply->body.value("protocol_version", 0), ms);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace sluice::cli
