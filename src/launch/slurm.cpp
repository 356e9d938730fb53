#include "launch/slurm.hpp"

#include <sys/stat.h>

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "launch/executable.hpp"
#include "launch/job_setup.hpp"
#include "launch/slurm_scripts.hpp"
#include "rollout/protocol.hpp"
#include "wire/messaging.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using core::Millis;
using nlohmann::json;

namespace {

// A Slurm command's output, then its exit, are waited for this long.
constexpr Millis kSlurmCommandTimeout{60000};
constexpr Millis kSlurmExitWait{5000};
// How often a submitted job's state is asked for (scontrol).
constexpr Millis kSlurmJobPoll{2000};

// 'word' for bash, whatever the word holds.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string shell_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

// The template with each __TOKEN__ replaced by its value.
std::string fill(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [token, value] : values) {
    for (std::size_t at = text.find(token); at != std::string::npos;
         at = text.find(token, at + value.size())) {
      text.replace(at, token.size(), value);
    }
  }
  return text;
}

core::Status write_text(const fs::path& path, const std::string& text, bool executable) {
  {
    std::ofstream f(path);
    f << text;
    if (!f) return core::internal_error(fmt::format("cannot write {}", path.string()));
  }
  if (executable) {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec,
                    fs::perm_options::replace, ec);
    if (ec) return core::internal_error(fmt::format("cannot chmod {}", path.string()));
  }
  return {};
}

// What sluice run does and a Slurm job cannot: refused by name rather than ignored.
core::Status check_for_slurm(const JobConfig& job, const SlurmArgs& args) {
  if (job.hosts.count > 0) {
    return core::invalid_argument(
        "hosts.count: emulated hosts are for sluice run on one machine; under Slurm the nodes "
        "are real (--nodes)");
  }
  if (job.chaos.kills > 0 || job.kill_rollout_after_s > 0 || job.stop_rollout_after_s > 0 ||
      job.pause_manager_after_s > 0) {
    return core::invalid_argument(
        "chaos settings (chaos.kills, kill_rollout_after_s, stop_rollout_after_s, "
        "pause_manager_after_s) are sluice run's; a Slurm job has none");
  }
  if (args.nodes == 0) return core::invalid_argument("--nodes must be at least 1");
  if (args.nodes > 1 && job.rollouts < args.nodes - 1) {
    return core::invalid_argument(
        fmt::format("{} rollouts cannot fill {} rollout nodes (every node but the head runs "
                    "rollouts): set rollouts to at least {} or use fewer nodes",
                    job.rollouts, args.nodes - 1, args.nodes - 1));
  }
  for (int port : {args.store_port, args.manager_port}) {
    if (port < 1 || port > 65535) {
      return core::invalid_argument(fmt::format("port {} is not in 1..65535", port));
    }
  }
  if (args.store_port == args.manager_port) {
    return core::invalid_argument("--store-port and --manager-port must differ");
  }
  return check_plain_public(job, args.allow_plain_public, "sluice slurm");
}

std::string sbatch_lines(const JobConfig& job, const SlurmArgs& args, const fs::path& dir) {
  std::string time = args.time;
  // Room beyond the job's own time-out for start-up and the end of the job.
  if (time.empty()) time = std::to_string(static_cast<long>(std::ceil(job.timeout_s / 60.0)) + 5);
  std::vector<std::string> lines{
      "--job-name=sluice-" + job.name,
      fmt::format("--nodes={}", args.nodes),
      "--exclusive",
      "--time=" + time,
      "--output=" + (dir / "slurm-%j.out").string(),
  };
  if (!args.partition.empty()) lines.push_back("--partition=" + args.partition);
  if (!args.account.empty()) lines.push_back("--account=" + args.account);
  lines.insert(lines.end(), args.sbatch_args.begin(), args.sbatch_args.end());
  std::string out;
  for (const auto& l : lines)
    out += "#SBATCH " + l + "\n";
  out.pop_back();
  return out;
}

// The role.sh case body: restarts allowed per role (0 when restarts are off).
std::string restart_limits(const RestartConfig& r) {
  std::string out;
  for (const char* role : {"weightstore", "relay", "rollout-manager", "rollout", "actor"}) {
    out += fmt::format("  {}) limit={} ;;\n", role, r.enabled ? r.limit(role) : 0);
  }
  out.pop_back();
  return out;
}

// A command role's words for role.sh: `env [-C WORKDIR] NAME=VALUE... PROGRAM ARGS...`.
std::string command_words(const RoleCommand& c, const std::string& program) {
  if (!c.enabled()) return "";
  std::vector<std::string> words;
  if (!c.env.empty() || !c.workdir.empty()) words.push_back("env");
  if (!c.workdir.empty()) {
    words.push_back("-C");  // GNU env: run in this folder (relative to role.sh's __WORKDIR__)
    words.push_back(c.workdir);
  }
  words.insert(words.end(), c.env.begin(), c.env.end());
  words.push_back(fs::absolute(program).string());
  words.insert(words.end(), c.argv.begin() + 1, c.argv.end());
  return shell_words(words);
}

// The run folder of a Slurm job, made empty: a path the #SBATCH lines can hold, not holding a
// Slurm job already.
core::Result<fs::path> make_slurm_dir(JobConfig& job) {
  if (job.out_dir.empty()) job.out_dir = default_run_dir(job);
  const fs::path dir = fs::absolute(job.out_dir).lexically_normal();
  if (dir.string().find_first_of(" \t\n\"'\\$%") != std::string::npos) {
    return core::invalid_argument(fmt::format(
        "run folder {}: Slurm's #SBATCH lines cannot quote it; choose a path without spaces, "
        "quotes, '$', '%' or '\\'",
        dir.string()));
  }
  job.out_dir = dir.string();
  if (fs::exists(dir / "job.sbatch")) {
    return core::failed_precondition(fmt::format(
        "{} holds a Slurm job already (job.sbatch): submit it with sbatch {}, or choose another "
        "run folder",
        dir.string(), (dir / "job.sbatch").string()));
  }
  SLUICE_TRY(make_run_dir(dir, false));
  std::error_code ec;
  fs::create_directories(dir / "conf", ec);
  if (ec) return core::internal_error(fmt::format("cannot create {}/conf", dir.string()));
  return dir;
}

// Every role's configuration file, under conf/; relays and rollouts learn their node (@HOST@)
// from the batch script.
core::Status write_slurm_roles(JobConfig& job, const fs::path& conf, const std::string& keys_dir) {
  SLUICE_TRY(write_role_file<kStoreSection>(conf / "weightstore.json", job, job.store));
  SLUICE_TRY(write_role_file<kManagerSection>(conf / "rollout-manager.json", job, job.manager));
  for (std::uint32_t i = 0; i < job.relays; ++i) {
    relay::RelayConfig rc = relay_role_config(job, i, keys_dir);
    rc.host = "@HOST@";  // the node it runs on: rollouts read from the relay on their node
    SLUICE_TRY(write_role_file<kRelaySection>(conf / (rc.relay_id + ".json"), job, rc));
  }
  for (std::uint32_t i = 0; i < job.rollouts; ++i) {
    rollout::RolloutConfig rc = rollout_role_config(job, i, keys_dir);
    rc.host = "@HOST@";
    SLUICE_TRY(write_role_file<kRolloutSection>(conf / (rc.rollout_id + ".json"), job, rc,
                                                &job.rollout_command));
  }
  return write_role_file<kActorSection>(conf / "actor.json", job, job.actor, &job.actor_command);
}

// role.sh (one role on a node, restarted as the job's restart policy says) and job.sbatch.
core::Status write_slurm_scripts(const JobConfig& job, const SlurmArgs& args, const fs::path& dir,
                                 const RolePrograms& programs, const std::string& keys_dir) {
  std::error_code ec;
  const std::string sluice = fs::absolute(self_exe()).string();
  const std::string cwd = fs::current_path(ec).string();
  SLUICE_TRY(write_text(
      dir / "role.sh",
      fill(kRoleSh, {{"__RUN__", shell_quote(dir.string())},
                     {"__SLUICE__", shell_quote(sluice)},
                     {"__WORKDIR__", shell_quote(cwd)},
                     {"__ACTOR_CMD__", command_words(job.actor_command, programs.actor)},
                     {"__ROLLOUT_CMD__", command_words(job.rollout_command, programs.rollout)},
                     {"__LIMITS__", restart_limits(job.restart)},
                     {"__BACKOFF_MS__", std::to_string(job.restart.backoff_ms)},
                     {"__BACKOFF_MAX_MS__", std::to_string(job.restart.backoff_max_ms)}}),
      true));
  const bool stops = job.duration_s > 0;
  const double actor_limit = stops ? job.duration_s : job.timeout_s;
  std::string auth = job.auth == "curve" ? "--keys " + shell_quote(keys_dir) : "--plain";
  return write_text(
      dir / "job.sbatch",
      fill(kJobSbatch,
           {{"__SBATCH__", sbatch_lines(job, args, dir)},
            {"__NAME__", job.name},
            {"__RUN__", shell_quote(dir.string())},
            {"__SLUICE__", shell_quote(sluice)},
            {"__STORE_PORT__", std::to_string(args.store_port)},
            {"__MANAGER_PORT__", std::to_string(args.manager_port)},
            {"__RELAYS__", std::to_string(job.relays)},
            {"__ROLLOUTS__", std::to_string(job.rollouts)},
            {"__AUTH__", auth},
            {"__READY_S__", std::to_string((job.restart.ready_timeout_ms + 999) / 1000)},
            {"__ACTOR_LIMIT_S__", std::to_string(static_cast<long>(std::ceil(actor_limit)))},
            {"__STOPS_ACTOR__", stops ? "1" : "0"}}),
      true);
}

// Writes the run folder; returns the batch script's path.
core::Result<fs::path> write_slurm_job(JobConfig job, const SlurmArgs& args,
                                       const std::vector<std::string>& environment) {
  SLUICE_TRY(check_for_slurm(job, args));
  // One relay per rollout node (the head's only when it is the one node), as with emulated hosts.
  if (args.nodes > 1 && job.relays != args.nodes - 1) {
    std::fprintf(stderr, "sluice slurm: %u relays, one on each rollout node\n", args.nodes - 1);
    job.relays = args.nodes - 1;
  }
  SLUICE_TRY(settle_job(job));
  SLUICE_ASSIGN_OR_RETURN(RolePrograms programs, resolve_role_programs(job, environment));
  SLUICE_ASSIGN_OR_RETURN(const fs::path dir, make_slurm_dir(job));
  // Every interface of the head listens; the others reach it by its node name, filled in by the
  // batch script (@HEAD@).
  JobEndpoints ep{fmt::format("tcp://0.0.0.0:{}", args.store_port),
                  fmt::format("tcp://@HEAD@:{}", args.store_port),
                  fmt::format("tcp://0.0.0.0:{}", args.manager_port),
                  fmt::format("tcp://@HEAD@:{}", args.manager_port)};
  wire_job(job, ep, dir.string());
  const std::string keys_dir = (dir / "keys").string();
  SLUICE_TRY(make_job_security(job, keys_dir, false));
  // The run folder is on a filesystem every node shares, as the role files are.
  SLUICE_TRY(make_agent_token(job, dir / "agent_token", (dir / "agent_token").string()).status());
  if (!job.rollout.agent_listen.empty() && job.rollout.agent_dir.empty()) {
    job.rollout.agent_dir = dir.string();
  }
  SLUICE_TRY(write_json_file(dir / "job.json", json::parse(core::config::to_json(job).dump())));
  SLUICE_TRY(write_slurm_roles(job, dir / "conf", keys_dir));
  SLUICE_TRY(write_slurm_scripts(job, args, dir, programs, keys_dir));
  return dir / "job.sbatch";
}

// Runs a Slurm command; its output (stdout and stderr), or why it could not run.
core::Result<std::string> slurm_command(std::vector<std::string> argv, int* status) {
  core::Subprocess::Options o;
  o.argv = std::move(argv);
  o.stderr_to_stdout = true;
  SLUICE_ASSIGN_OR_RETURN(auto p, core::Subprocess::spawn(o));
  std::string out = p->read_all(kSlurmCommandTimeout);
  auto code = p->wait(kSlurmExitWait);
  if (!code.is_ok()) {
    return core::timeout_error(fmt::format("{} did not finish within {} s", o.argv[0],
                                           kSlurmCommandTimeout.count() / 1000));
  }
  *status = *code;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

std::string program_on_path(const std::string& name, const std::vector<std::string>& env) {
  JobConfig probe;
  probe.rollout_command.argv = {name};
  auto found = resolve_role_programs(probe, env);
  return found.is_ok() ? found->rollout : "";
}

// The value of "JobState=" in `scontrol show job -o` output, or "" when there is none. (Not
// <regex>: under the sanitizer builds it trips GCC 12's -Wmaybe-uninitialized.)
std::string job_state_of(const std::string& out) {
  const std::string key = "JobState=";
  auto at = out.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  auto end = at;
  while (end < out.size() &&
         (std::isupper(static_cast<unsigned char>(out[end])) || out[end] == '_'))
    ++end;
  return out.substr(at, end - at);
}

// Waits for the Slurm job to leave the queue; its final state ("COMPLETED", ...), or "" when
// Slurm forgot the job before we saw its end.
core::Result<std::string> wait_for_job(const std::string& scontrol, const std::string& id,
                                       double timeout_s) {
  const std::vector<std::string> running{"PENDING",   "CONFIGURING", "RUNNING", "COMPLETING",
                                         "SUSPENDED", "REQUEUED",    "RESIZING"};
  auto deadline = core::Clock::now() + std::chrono::duration_cast<core::Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  std::string last;
  while (core::Clock::now() < deadline) {
    int status = 0;
    SLUICE_ASSIGN_OR_RETURN(std::string out,
                            slurm_command({scontrol, "show", "job", "-o", id}, &status));
    std::string state = job_state_of(out);
    if (status == 0 && !state.empty()) {
      if (state != last)
        std::fprintf(stderr, "sluice slurm: job %s %s\n", id.c_str(), state.c_str());
      last = state;
      if (std::find(running.begin(), running.end(), state) == running.end()) return state;
    } else if (out.find("Invalid job id") != std::string::npos) {
      return std::string();
    } else {
      return core::unavailable(fmt::format("scontrol show job {}: {}", id, out));
    }
    std::this_thread::sleep_for(kSlurmJobPoll);
  }
  return core::timeout_error(fmt::format(
      "Slurm job {} did not end within {:.0f} s (it is {}; it goes on: scancel {} ends it)", id,
      timeout_s, last.empty() ? "unknown" : last, id));
}

}  // namespace

int run_slurm(const SlurmArgs& args, const std::vector<std::string>& environment) {
  auto job = load_job_file(args.job_path, args.overrides);
  if (job.is_ok() && !args.out_dir.empty()) job->out_dir = args.out_dir;
  if (!job.is_ok()) {
    std::fprintf(stderr, "sluice slurm: %s\n", job.status().to_string().c_str());
    return 2;
  }
  if (args.wait && !args.submit) {
    std::fprintf(stderr, "sluice slurm: --wait goes with --submit\n");
    return 2;
  }
  // posix_spawn looks nothing up: Slurm's commands are found on PATH first.
  const std::string sbatch = program_on_path("sbatch", environment);
  const std::string scontrol = program_on_path("scontrol", environment);
  if (args.submit && (sbatch.empty() || scontrol.empty())) {
    std::fprintf(stderr,
                 "sluice slurm: sbatch or scontrol is not on PATH: --submit needs Slurm's "
                 "commands (Debian: slurm-client); the files are not written\n");
    return 2;
  }
  auto script = write_slurm_job(*job, args, environment);
  if (!script.is_ok()) {
    std::fprintf(stderr, "sluice slurm: %s: %s\n", args.job_path.c_str(),
                 script.status().to_string().c_str());
    return 2;
  }
  const fs::path dir = script->parent_path();
  std::printf("wrote %s (role files in %s/conf, keys in %s/keys)\n", script->c_str(), dir.c_str(),
              dir.c_str());
  if (!args.submit) {
    std::printf("submit with: sbatch %s\n", script->c_str());
    return 0;
  }
  int status = 0;
  auto out = slurm_command({sbatch, "--parsable", script->string()}, &status);
  if (!out.is_ok() || status != 0) {
    std::fprintf(stderr, "sluice slurm: sbatch failed: %s\n",
                 out.is_ok() ? out->c_str() : out.status().to_string().c_str());
    return 1;
  }
  std::string id = out->substr(0, out->find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    std::fprintf(stderr, "sluice slurm: sbatch said '%s', not a job id\n", out->c_str());
    return 1;
  }
  std::printf("submitted Slurm job %s; its output: %s\n", id.c_str(),
              (dir / ("slurm-" + id + ".out")).c_str());
  std::fflush(stdout);
  if (!args.wait) return 0;
  double timeout = args.wait_timeout_s > 0 ? args.wait_timeout_s : job->timeout_s + 300;
  auto state = wait_for_job(scontrol, id, timeout);
  if (!state.is_ok()) {
    std::fprintf(stderr, "sluice slurm: %s\n", state.status().to_string().c_str());
    return 1;
  }
  std::ifstream f(dir / "summary.json");
  json summary = json::parse(f, nullptr, false);
  std::string outcome = summary.is_object() ? summary.value("outcome", "?") : "no summary.json";
  std::printf("Slurm job %s %s; outcome: %s; run folder: %s\n", id.c_str(),
              state->empty() ? "ended" : state->c_str(), outcome.c_str(), dir.c_str());
  const bool ok = (state->empty() || *state == "COMPLETED") && outcome == "ok";
  if (!ok) {
    std::fprintf(stderr, "sluice slurm: the job failed; see %s and the roles' logs in %s\n",
                 (dir / ("slurm-" + id + ".out")).c_str(), dir.c_str());
  }
  return ok ? 0 : 1;
}

}  // namespace sluice::cli
