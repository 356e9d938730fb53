// What the attack suite's two files share (bench/attack.cpp plays the control plane,
// bench/attack_stream.cpp the chunk servers): the record of one attempt and the job under attack.
// The report and a member's keys are in bench/attack_report.cpp.
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "weightstore/store.hpp"
#include "wire/security.hpp"

namespace sluice::weightstore {
class StoreClient;
}  // namespace sluice::weightstore

namespace sluice::cli::attack {

// What an attempt came to. Refused and survived are what a sound job does; skipped means the job
// lacks what the attempt needs.
enum class Verdict { kRefused, kSurvived, kBreach, kSkipped };

struct Attempt {
  std::string name;   // "stranger-curve store", ...
  std::string tried;  // what was sent
  std::string got;    // what came back
  Verdict verdict = Verdict::kRefused;
};

// A status for one line: the code and the message, shortened.
std::string brief(const core::Status& s);

// Prints each attempt as it is added, one line, and counts breaches.
class Report {
 public:
  // `ended_ok`: whether the job has ended with outcome ok. A breach seen once it has (a server
  // that no longer answers) is not the attack's doing: it is printed as skipped, saying so.
  explicit Report(std::function<bool()> ended_ok) : ended_ok_(std::move(ended_ok)) {}
  void add(Attempt a);
  // Shorthands.
  void skip(const std::string& name, const std::string& why);
  std::size_t breaches() const { return breaches_; }
  std::size_t played() const { return played_; }
  std::size_t skipped() const { return skipped_; }

 private:
  std::function<bool()> ended_ok_;
  std::size_t breaches_ = 0, played_ = 0, skipped_ = 0;
};

// The job as its run folder names it.
struct Target {
  std::string run_dir;
  std::string store;    // the store's endpoint, as the roles reach it
  std::string manager;  // the manager's endpoint
  std::string model;
  bool curve = true;
  std::string stream_encryption;  // the relays' chunk streams: on, off or auto (between DCs)
  std::string keys_dir;
  std::shared_ptr<const core::Members> members;
  std::vector<std::string> relays;    // relay identities with keys
  std::vector<std::string> rollouts;  // rollout identities with keys
};

// The security of the job's member `identity` (its key file), or plain mode for a plain job.
core::Result<core::Security> member_security(const Target& t, const std::string& identity);

// A fresh read plan of the newest version, taken as the operator; the caller releases its lease.
using PlanSource = std::function<core::Result<weightstore::ReadPlan>()>;
using LeaseRelease = std::function<void(std::uint64_t lease_id)>;

// The chunk-server attacks (bench/attack_stream.cpp): every chunk server the plans name.
void play_chunk_servers(const PlanSource& plan, const LeaseRelease& release,
                        std::uint32_t idle_connections, Report& report);

// The attacks on served bytes (bench/attack_bytes.cpp), as `member` (a member that may serve):
// a copy of the newest version with one byte changed, registered under an id of the member's,
// and the member answering an encrypted chunk stream in another holder's place. Each is read
// back as the job's readers read. Then, where the job encrypts its chunk streams, a reader
// without the job's stream keys (as a Python Reader given none) reading a holder's stream.
void play_served_bytes(core::EventLoop& loop, const Target& t,
                       weightstore::StoreClient& operator_store, const std::string& member,
                       Report& report);

// The attacks on the agent endpoints (bench/attack_agent.cpp) that the run folder names
// (agent-*.url, agent_token): no token and a wrong one, malformed bodies, an oversized body
// whose 413 must be read, a body that never ends, and more idle connections than the endpoint
// holds; after each, a real request must still be answered.
void play_agent_endpoints(const std::string& run_dir, Report& report);

}  // namespace sluice::cli::attack
