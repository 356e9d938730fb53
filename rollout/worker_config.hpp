// The rollout worker's configuration (`sluice rollout`, the job file's rollout section) and the
// time-outs its weight pulls keep. Apart from rollout/worker.hpp so that the worker's parts
// (rollout/worker_state.hpp, weight_follower.hpp, episode_waits.hpp) take it without the worker.
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rl/env_latency.hpp"
#include "rl/task.hpp"
#include "rollout/agent_config.hpp"
#include "rollout/model_engine.hpp"
#include "rollout/sim_engine.hpp"
#include "weightstore/holder_config.hpp"
#include "wire/security.hpp"

namespace sluice::rollout {

// A rollout's requests to the store (its reader's).
inline constexpr core::Millis kRolloutStoreRequestTimeout{2000};
// load_version() waits this long for the version the manager named, checking the background pull
// this often.
inline constexpr core::Millis kLoadVersionWait{30000};
inline constexpr core::Millis kLoadVersionPoll{50};

// store, security, stream_encryption, store_lease_ttl_ms and the topology labels (host, rack,
// datacenter): weightstore::HolderRoleConfig and TopologyLabels.
struct RolloutConfig : weightstore::HolderRoleConfig, weightstore::TopologyLabels {
  std::string manager = "tcp://127.0.0.1:5560";  // rollout manager endpoint
  std::string model = "policy";
  std::string rollout_id;      // unique; default: the key's identity (curve), else rollout-<pid>
  std::string engine = "sim";  // sim (the simulated engine)
  SimEngineConfig sim;
  ModelEngineConfig gpt;         // engine model: the reference GPT
  rl::TaskConfig task;           // engine model: the task whose reward scores responses
  std::uint64_t report_ms = 25;  // report (and heartbeat) period
  // A report waits this long for its reply; after one that got none, the next goes report_retry_ms
  // later. Together they are the silence one lost reply costs, which must leave the manager's
  // heartbeat time-out a margin (`sluice run` refuses a job where twice their sum exceeds it).
  // 0: derived from the manager's heartbeat_timeout_ms by `sluice run` (a quarter and an eighth
  // of it), else kDefaultReportTimeoutMs and kDefaultReportRetryMs.
  std::uint64_t report_timeout_ms = 0;
  std::uint64_t report_retry_ms = 0;
  std::uint32_t partial_every = 8;  // stream in-flight states every N reports
  // Give up after the manager is silent this long. Long enough for a manager restart: meanwhile
  // the rollout keeps generating and holds what it finishes (see max_held_finished).
  std::uint64_t manager_timeout_ms = 60000;
  // Finished trajectories held while the manager cannot be reached; when full, no new work is
  // admitted (nothing is dropped).
  std::uint32_t max_held_finished = 4096;
  std::uint32_t pull_in_flight = 8;                // GETs in flight per source when pulling weights
  std::uint64_t max_version_bytes = 256ull << 30;  // a larger version is refused unread
  // Serve the loaded version to peers (the design's "every receiver becomes a source"): the
  // rollout registers it with the store as a holder, and unpublishes and drains it before freeing
  // it. "auto" serves only with UCX newer than 1.13; "on" and "off" force it. UCX 1.13 crashes a
  // reader in ucp_ep_rkey_unpack when the shared memory behind a key is already gone (seen in a
  // fleet test: a rollout resumed after SIGSTOP unpacked the key of a peer that had exited), and
  // rollouts come and go. (Its other fault, a tcp holder aborting when its reader dies, chunk
  // streams avoid: core::tcp_holder_survives_reader_death.) Relays and the publisher, which
  // outlive their readers, serve regardless.
  std::string serve = "auto";
  // With a host label: a new version is read only from a holder on this host (its relay) once
  // that holds all of it, for up to this long after the rollout first sees it; then from any.
  std::uint64_t local_wait_ms = 10000;
  // false: the first version (none held yet) is read from every holder at once, striped, without
  // the local wait; `sluice run --add` sets it for joiners, which have nothing to generate with.
  bool local_wait_first = true;
  // Holder ids this rollout reads its first version (its join) from, in order of preference:
  // each chunk from the first of them that holds it (empty: any holder, striped). Later versions
  // are read as usual. A benchmark's switch ("the trainer's copy only": the master relay, which
  // the trainer pushes to and hands off to, then the actor).
  std::vector<std::string> join_read_from;
  // On SIGTERM (or stop()) the rollout hands its queued and in-flight trajectories back to the
  // manager in one leaving report, waiting at most this long for the answer (on failure the
  // manager's heartbeat expiry reclaims them as after a kill -9).
  std::uint64_t leave_timeout_ms = 2000;
  // A sequence exported with its KV cache sends the cache over UCX (rollout/kv_transfer.hpp): the
  // manager forwards a reference, the destination reads the bytes from this rollout. false: the
  // cache travels inside the manager's messages as JSON numbers.
  bool kv_ucx = true;
  // How long an exported KV cache stays readable here (the destination reads it when the manager
  // forwards it, normally within a few reports); then it is freed.
  std::uint64_t kv_hold_ms = 30000;
  // A destination's whole read of one KV cache; past it the sequence is re-prefilled.
  std::uint64_t kv_read_timeout_ms = 5000;
  // Episodes (the model engine with task.tool calc, the sim engine with sim.turns > 1): how long
  // the environment takes to answer a call, and how long the rollout waits for an answer before
  // it ends the episode (dropped with its group, counted).
  rl::EnvLatencyConfig env_latency;
  std::uint64_t env_timeout_ms = 120000;
  // An episode's KV cache waits with it while its environment answers, and is used again when the
  // weights did not change meanwhile (else it is re-prefilled); false: always re-prefilled.
  bool env_keep_kv = true;
  // The agent endpoint (rollout/agent_env.hpp), engine model: "HOST:PORT" to serve it on (port 0:
  // a free one; empty: off). Requests must carry the token held in agent_token_file, a file only
  // its owner may read (`sluice run` makes one per job: the run folder's agent_token, 0600; the
  // token itself is never a configuration value, so it is in no role file, log or printout).
  // The rollout writes its endpoint's URL to agent_dir/agent-<rollout_id>.url (empty: nowhere).
  // `agent`: the endpoint's bounds and deadlines.
  std::string agent_listen;
  std::string agent_token_file;
  std::string agent_dir;
  AgentEndpointConfig agent;
  // An environment in another process (rollout/command_env.hpp), engine model: its argv (empty:
  // none), run in env_workdir (`sluice run`: the job file's folder unless set; relative paths are
  // taken from there), and the token that ends a model turn (EOS by default).
  std::vector<std::string> env_command;
  std::string env_workdir;
  std::int32_t env_call_token = 2;
  // The longest line taken from env_command's program, in bytes (at least 1); a longer line is
  // dropped as it comes and ends the episodes pending there (counted).
  std::uint64_t env_max_line_bytes = std::uint64_t{8} << 20;
  // Under the agent endpoint: work no agent has taken for this long goes back to the manager
  // (counted), to run where agents are taking work (0: it waits here).
  std::uint64_t agent_claim_timeout_ms = 30000;

  template <typename V>
  void describe(V& v) {
    v("manager", manager, "rollout manager endpoint");
    HolderRoleConfig::describe(v);
    v("model", model, "model whose versions this rollout pulls");
    v("rollout_id", rollout_id,
      "unique rollout name; in curve mode it must be the key file's identity, which is the "
      "default (plain: rollout-<pid>)");
    v("engine", engine, "engine: sim or model");
    v("sim", sim, "the simulated engine");
    v("gpt", gpt, "engine model: the reference GPT");
    v("task", task, "engine model: the task whose reward scores responses");
    v("report_ms", report_ms, "report and heartbeat period in ms");
    v("report_timeout_ms", report_timeout_ms,
      "a report waits this long for its reply, in ms (0: a quarter of the manager's heartbeat "
      "time-out under sluice run, else 500)");
    v("report_retry_ms", report_retry_ms,
      "after a report that got no reply, the next goes this much later, in ms (0: an eighth of "
      "the manager's heartbeat time-out under sluice run, else 250)");
    v("partial_every", partial_every, "stream in-flight states every N reports (0: never)");
    v("manager_timeout_ms", manager_timeout_ms, "exit when the manager is silent this long");
    v("kv_ucx", kv_ucx, "move exported KV caches over UCX rather than in the manager's messages");
    v("kv_hold_ms", kv_hold_ms, "how long an exported KV cache stays readable here, in ms");
    v("kv_read_timeout_ms", kv_read_timeout_ms,
      "a KV cache read that takes longer fails (the sequence is re-prefilled)");
    v("env_latency", env_latency, "episodes: how long the environment takes to answer a call");
    v("env_timeout_ms", env_timeout_ms,
      "episodes: an environment silent this long ends its episode (ms, default 120000)");
    v("env_keep_kv", env_keep_kv,
      "episodes: keep a KV cache while its environment answers, used again on unchanged weights "
      "(default true)");
    v("agent_listen", agent_listen,
      "engine model: serve the agent endpoint (/v1/episodes, /v1/completions, "
      "/v1/chat/completions) on HOST:PORT (default empty: off)");
    v("agent_token_file", agent_token_file,
      "a file (mode 0600) holding the token agent requests must carry (sluice run makes one)");
    v("agent_dir", agent_dir,
      "folder to write agent-<rollout_id>.url into (sluice run: the run's)");
    v("agent", agent, "the agent endpoint's bounds and deadlines");
    v("env_command", env_command,
      "engine model: an environment program and its arguments, speaking JSON lines (reset, step) "
      "on stdin and stdout (default empty: none)");
    v("env_workdir", env_workdir,
      "the environment program's working folder (sluice run: the job file's folder)");
    v("env_call_token", env_call_token,
      "the token that ends a model turn for env_command (default 2, EOS)");
    v("env_max_line_bytes", env_max_line_bytes,
      "the longest line taken from env_command's program (default 8388608); a longer one ends the "
      "episodes pending there, counted");
    v("agent_claim_timeout_ms", agent_claim_timeout_ms,
      "agent endpoint: work no agent takes in this long goes back to the manager, counted (ms, "
      "default 30000; 0: it waits)");
    v("max_held_finished", max_held_finished,
      "finished trajectories held while the manager is unreachable; when full, no new work starts");
    v("pull_in_flight", pull_in_flight, "GETs in flight per source when pulling weights");
    v("max_version_bytes", max_version_bytes, "largest version this rollout pulls, in bytes");
    v("serve", serve,
      "serve the loaded version to peers: auto (with UCX newer than 1.13), on or off");
    v("local_wait_ms", local_wait_ms,
      "with a host label: read a new version from this host's holders only, once one holds all of "
      "it, for up to this long (ms; 0: from the nearest holders at once)");
    v("local_wait_first", local_wait_first,
      "false: read the first version from every holder at once, without the local wait (set for "
      "joiners by sluice run --add; default true)");
    v("join_read_from", join_read_from,
      "holder ids to read the first version from, in order of preference (default empty: any "
      "holder, striped across the nearest)");
    v("leave_timeout_ms", leave_timeout_ms,
      "on SIGTERM: longest wait for the manager to take back this rollout's work (ms, > 0)");
    TopologyLabels::describe(v);
  }
  core::Status validate() const;
  // Fills report_timeout_ms and report_retry_ms where 0, from the manager's heartbeat time-out.
  void derive_report_timing(std::uint64_t heartbeat_timeout_ms);
  std::uint64_t effective_report_timeout_ms() const {
    return report_timeout_ms > 0 ? report_timeout_ms : kDefaultReportTimeoutMs;
  }
  std::uint64_t effective_report_retry_ms() const {
    return report_retry_ms > 0 ? report_retry_ms : kDefaultReportRetryMs;
  }
  static constexpr std::uint64_t kDefaultReportTimeoutMs = 500;
  static constexpr std::uint64_t kDefaultReportRetryMs = 250;
};

}  // namespace sluice::rollout
