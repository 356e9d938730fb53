// `sluice attack RUN_DIR`: plays known attacks against a running job and reports what each got.
//
// Given the run folder of a job that `sluice run` is running (its job.json names the store's and
// the manager's endpoints, keys/ holds every identity's key and the members file), the attacker
// plays, with a bounded wait on every step:
//   - strangers: a fresh CURVE key that is not a member, and a client without CURVE at all,
//     asking the store and the manager something;
//   - a relay key (the job's non-actor member) registering a new version, a forged manifest of
//     the newest version and a huge version with the store, and making a manifest;
//   - members acting for others: pin/unpin with another's owner, renew/release of another's
//     lease, a rollout reporting as another, collecting trajectories or announcing versions
//     without being the actor, a sequence with a forged KV reference;
//   - an oversized message;
//   - every chunk server that a read plan names: 1000 idle connections (beyond the per-peer cap),
//     a slow-loris partial request, a flood of requests with bad tokens and reads outside a
//     region, each while a real read of a verified chunk must still succeed;
//   - the keys folder's and members file's modes;
//   - every agent endpoint the run folder names (agent-*.url): requests without the token or
//     with a wrong one, malformed bodies (wrong JSON types, nulls, huge numbers), a body past the
//     bound whose 413 must be read, a body that never ends and more idle connections than the
//     endpoint holds, each followed by a real request that must still be answered;
//   - served bytes: a member registers a copy of the newest version with one byte changed, and a
//     reader sent to it by a read plan must refuse it; a member answers an encrypted chunk
//     stream in place of the holder a plan names, and the reader must refuse its key.
// It prints one line per attempt: what it tried, what it got, and whether that is refused or
// survived (what a sound job does), a breach, or skipped (the job lacks what it needs, with why).
//
// Exit status: 0 when nothing was breached, 1 on any breach, 2 for bad input (no run folder, a
// job that has ended or does not answer).
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <string>

namespace sluice::cli {

struct AttackArgs {
  std::string run_dir;
  std::uint32_t wait_ms = 2000;           // how long a refused request is waited for
  std::uint32_t idle_connections = 1000;  // idle connections held open against each chunk server
  std::string only;                       // comma-separated phases to play (empty: every one)
};

int run_attack(const AttackArgs& args);

}  // namespace sluice::cli
