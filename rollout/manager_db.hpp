// The rollout manager's durable state: an embedded SQLite database (WAL mode) in the run folder.
//
// What is kept is what cannot be rebuilt from the other roles after a manager restart: the prompt
// cursor, the newest published version, what the actor consumed and acknowledged, the ids of the
// finished trajectories the actor has not acknowledged yet with their full JSON, which
// trajectories are done (acknowledged: a floor below which every trajectory is done, and the done
// ids above it; rollout/done_set.hpp), and the prompts whose group is doomed. In-flight work is not
// kept: the rollouts name it in their next reports (see Manager). The ids of the live rollouts are
// kept, so that a restarted manager knows when every one of them has reported.
//
// Bounded: an acknowledged trajectory leaves `finished` and `unacked` and joins `done`, whose rows
// below the floor are deleted in the same transaction, as are doomed prompts below it. So the file
// and the restore cost what is in flight and done out of order, not the job's length (measured in
// tests/rollout/manager_scale_test.cpp).
//
// Why a database rather than rebuilding everything from the others' soft state: rollouts could
// re-report in-flight work and the actor its consumed ids, but finished-not-yet-acknowledged
// trajectories live only here between a rollout's report and the actor's checkpoint, and the
// prompt cursor would need a scan of every role to recover. One small transaction per request
// is cheap and keeps recovery local: measured (tests/rollout/manager_db_test.cpp, "commit cost",
// on a shared, loaded 2-core machine) 0.04-0.1 ms for a commit of counters only, 0.1-0.3 ms for a
// report with one finished trajectory (~5 KB of JSON), 3-5 ms for one with 64 (0.05-0.08 ms each),
// alike with 100,000 finished ids already held. A request that changes nothing durable commits
// nothing.
//
// Durability: journal_mode=WAL with synchronous=NORMAL. A committed transaction survives the
// process being killed (kill -9): it is in the WAL file, which the OS holds. It may be lost on
// power loss or a kernel crash (the WAL is not fsynced at each commit), which the job accepts:
// rollouts and the actor then redo a little work, and nothing is counted twice.
//
// Thread safety: one thread (the manager's loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

struct sqlite3;

namespace sluice::rollout {

// The counters kept across restarts.
struct ManagerCounters {
  std::uint64_t next_prompt = 0;
  std::uint64_t latest = 0;
  std::uint64_t consumed = 0;
  std::uint64_t acked = 0;
  std::uint64_t finished = 0;    // trajectories finished, each once, since the job began
  std::uint64_t done_floor = 0;  // every trajectory of prompts below it is done
  bool operator==(const ManagerCounters&) const = default;
};

// A rollout joined, or left or was declared dead.
struct RolloutChange {
  std::string id;
  bool joined = false;  // false: gone
};

// One request's changes, committed as one transaction.
struct ManagerChanges {
  ManagerCounters counters;
  std::vector<std::string> finished;                         // ids newly finished
  std::vector<std::pair<std::string, std::string>> unacked;  // id, trajectory JSON
  std::vector<std::string> acked;                            // ids done (acknowledged)
  std::vector<std::string> doomed;                           // prompt ids
  // Rollouts that joined, and that left or were declared dead, in the order it happened: who a
  // restarted manager waits for. Changes wait for a commit (a failed one is retried with the
  // next), so one rollout can be declared dead and join again within one commit: then it is live.
  std::vector<RolloutChange> rollouts;
  void rollout_joined(const std::string& id) { rollouts.push_back({id, true}); }
  void rollout_gone(const std::string& id) { rollouts.push_back({id, false}); }
  bool counters_changed = false;
  bool empty() const {
    return !counters_changed && finished.empty() && unacked.empty() && acked.empty() &&
           doomed.empty() && rollouts.empty();
  }
};

// Everything the database holds, as read at start-up.
struct ManagerSnapshot {
  ManagerCounters counters;
  std::vector<std::string> finished;  // finished, not acknowledged
  std::vector<std::string> done;      // done ids at or above counters.done_floor
  std::vector<std::pair<std::string, std::string>> unacked;  // id, trajectory JSON, in id order
  std::vector<std::string> doomed;
  std::vector<std::string> rollouts;  // live when the manager stopped, as far as it knew
};

class ManagerDb {
 public:
  // Opens (creating when absent) the database at `path`.
  static core::Result<std::unique_ptr<ManagerDb>> open(const std::string& path);
  ~ManagerDb();
  ManagerDb(const ManagerDb&) = delete;
  ManagerDb& operator=(const ManagerDb&) = delete;

  core::Result<ManagerSnapshot> load();
  // Applies `c` in one transaction; on an error nothing of it is applied.
  core::Status commit(const ManagerChanges& c);
  const std::string& path() const { return path_; }

 private:
  ManagerDb(sqlite3* db, std::string path);
  core::Status exec(const char* sql);
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace sluice::rollout
