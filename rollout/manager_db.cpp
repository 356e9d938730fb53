#include "rollout/manager_db.hpp"

#include <fmt/format.h>
#include <sqlite3.h>

#include "core/log.hpp"
#include "rollout/protocol.hpp"

namespace sluice::rollout {

namespace log = core::log;

namespace {

// A second manager on the same file waits this long for the lock, then fails clearly.
constexpr int kBusyTimeoutMs = 2000;

// One prepared statement, finalized on every path.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  core::Status status(const char* what) const {
    if (rc_ == SQLITE_OK || rc_ == SQLITE_DONE || rc_ == SQLITE_ROW) return {};
    return core::internal_error(fmt::format("manager db: {}: {}", what, sqlite3_errmsg(db_)));
  }
  void bind(int i, const std::string& s) {
    if (rc_ == SQLITE_OK)
      rc_ = sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void bind(int i, std::uint64_t v) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(stmt_, i, static_cast<sqlite3_int64>(v));
  }
  // Runs a statement that returns no rows, then resets it for the next bindings.
  core::Status run(const char* what) {
    if (rc_ != SQLITE_OK) return status(what);
    int rc = sqlite3_step(stmt_);
    if (rc != SQLITE_DONE) {
      rc_ = rc;
      return status(what);
    }
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return {};
  }
  // Steps a query: true while there is a row.
  bool next() {
    if (rc_ != SQLITE_OK && rc_ != SQLITE_ROW) return false;
    rc_ = sqlite3_step(stmt_);
    return rc_ == SQLITE_ROW;
  }
  std::string text(int col) const {
    const auto* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
             : std::string();
  }
  std::uint64_t u64(int col) const {
    return static_cast<std::uint64_t>(sqlite3_column_int64(stmt_, col));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS counters (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS finished (id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS unacked (id TEXT PRIMARY KEY, trajectory TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS doomed (prompt_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS done (id TEXT PRIMARY KEY, prompt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (id TEXT PRIMARY KEY);
)";

// The prompt index of a trajectory id "p<N>/<k>" (for the done table's floor).
std::uint64_t prompt_index(const std::string& id) {
  auto ix = parse_trajectory_id(id);
  return ix ? ix->first : 0;
}

}  // namespace

core::Result<std::unique_ptr<ManagerDb>> ManagerDb::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<ManagerDb> out(new ManagerDb(db, path));  // closes `db` on every path
  if (rc != SQLITE_OK) {
    return core::unavailable(
        fmt::format("manager db {}: open: {}", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
  }
  // WAL + synchronous=NORMAL: a commit survives kill -9 of this process, not power loss (see the
  // header). busy_timeout: a second manager on the same file waits, then fails clearly.
  SLUICE_TRY(out->exec("PRAGMA journal_mode=WAL"));
  SLUICE_TRY(out->exec("PRAGMA synchronous=NORMAL"));
  SLUICE_TRY(out->exec(fmt::format("PRAGMA busy_timeout={}", kBusyTimeoutMs).c_str()));
  SLUICE_TRY(out->exec(kSchema));
  return out;
}

ManagerDb::ManagerDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

ManagerDb::~ManagerDb() {
  if (db_ && sqlite3_close(db_) != SQLITE_OK) {
    log::warn("manager db {}: close failed: {}", path_, sqlite3_errmsg(db_));
  }
}

core::Status ManagerDb::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return core::internal_error(fmt::format("manager db {}: '{}': {}", path_, sql, msg));
  }
  return {};
}

core::Result<ManagerSnapshot> ManagerDb::load() {
  ManagerSnapshot s;
  {
    Stmt q(db_, "SELECT key, value FROM counters");
    while (q.next()) {
      std::string k = q.text(0);
      std::uint64_t v = q.u64(1);
      if (k == "next_prompt") s.counters.next_prompt = v;
      if (k == "latest") s.counters.latest = v;
      if (k == "consumed") s.counters.consumed = v;
      if (k == "acked") s.counters.acked = v;
      if (k == "finished") s.counters.finished = v;
      if (k == "done_floor") s.counters.done_floor = v;
    }
    SLUICE_TRY(q.status("read counters"));
  }
  {
    Stmt q(db_, "SELECT id FROM finished ORDER BY id");
    while (q.next())
      s.finished.push_back(q.text(0));
    SLUICE_TRY(q.status("read finished"));
  }
  {
    Stmt q(db_, "SELECT id, trajectory FROM unacked ORDER BY id");
    while (q.next())
      s.unacked.emplace_back(q.text(0), q.text(1));
    SLUICE_TRY(q.status("read unacked"));
  }
  {
    Stmt q(db_, "SELECT id FROM done ORDER BY id");
    while (q.next())
      s.done.push_back(q.text(0));
    SLUICE_TRY(q.status("read done"));
  }
  {
    Stmt q(db_, "SELECT id FROM rollouts ORDER BY id");
    while (q.next())
      s.rollouts.push_back(q.text(0));
    SLUICE_TRY(q.status("read rollouts"));
  }
  {
    Stmt q(db_, "SELECT prompt_id FROM doomed ORDER BY prompt_id");
    while (q.next())
      s.doomed.push_back(q.text(0));
    SLUICE_TRY(q.status("read doomed"));
  }
  return s;
}

core::Status ManagerDb::commit(const ManagerChanges& c) {
  if (c.empty()) return {};
  SLUICE_TRY(exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> core::Status {
    if (c.counters_changed) {
      Stmt st(db_, "INSERT OR REPLACE INTO counters (key, value) VALUES (?1, ?2)");
      for (const auto& [k, v] :
           {std::pair{"next_prompt", c.counters.next_prompt},
            std::pair{"latest", c.counters.latest}, std::pair{"consumed", c.counters.consumed},
            std::pair{"acked", c.counters.acked}, std::pair{"finished", c.counters.finished},
            std::pair{"done_floor", c.counters.done_floor}}) {
        st.bind(1, std::string(k));
        st.bind(2, v);
        SLUICE_TRY(st.run("write counters"));
      }
    }
    if (!c.finished.empty()) {
      Stmt st(db_, "INSERT OR IGNORE INTO finished (id) VALUES (?1)");
      for (const auto& id : c.finished) {
        st.bind(1, id);
        SLUICE_TRY(st.run("write finished"));
      }
    }
    if (!c.unacked.empty()) {
      Stmt st(db_, "INSERT OR REPLACE INTO unacked (id, trajectory) VALUES (?1, ?2)");
      for (const auto& [id, j] : c.unacked) {
        st.bind(1, id);
        st.bind(2, j);
        SLUICE_TRY(st.run("write unacked"));
      }
    }
    if (!c.acked.empty()) {
      Stmt unacked(db_, "DELETE FROM unacked WHERE id = ?1");
      Stmt finished(db_, "DELETE FROM finished WHERE id = ?1");
      Stmt done(db_, "INSERT OR IGNORE INTO done (id, prompt) VALUES (?1, ?2)");
      for (const auto& id : c.acked) {
        unacked.bind(1, id);
        SLUICE_TRY(unacked.run("delete acked"));
        finished.bind(1, id);
        SLUICE_TRY(finished.run("delete acked"));
        done.bind(1, id);
        done.bind(2, prompt_index(id));
        SLUICE_TRY(done.run("write done"));
      }
    }
    if (!c.doomed.empty()) {
      Stmt st(db_, "INSERT OR IGNORE INTO doomed (prompt_id) VALUES (?1)");
      for (const auto& id : c.doomed) {
        st.bind(1, id);
        SLUICE_TRY(st.run("write doomed"));
      }
    }
    if (!c.rollouts.empty()) {
      // In the order they happened: the last change of each rollout is what stays.
      Stmt join(db_, "INSERT OR IGNORE INTO rollouts (id) VALUES (?1)");
      Stmt gone(db_, "DELETE FROM rollouts WHERE id = ?1");
      for (const auto& ch : c.rollouts) {
        Stmt& st = ch.joined ? join : gone;
        st.bind(1, ch.id);
        SLUICE_TRY(st.run(ch.joined ? "write rollouts" : "delete rollouts"));
      }
    }
    if (c.counters_changed && c.counters.done_floor > 0) {
      // Below the floor every trajectory is done: the floor alone says so.
      Stmt done(db_, "DELETE FROM done WHERE prompt < ?1");
      done.bind(1, c.counters.done_floor);
      SLUICE_TRY(done.run("trim done"));
      Stmt doomed(db_, "DELETE FROM doomed WHERE CAST(substr(prompt_id, 2) AS INTEGER) < ?1");
      doomed.bind(1, c.counters.done_floor);
      SLUICE_TRY(doomed.run("trim doomed"));
    }
    return {};
  };
  core::Status st = body();
  if (!st.is_ok()) {
    exec("ROLLBACK").ignore();
    return st;
  }
  return exec("COMMIT");
}

}  // namespace sluice::rollout
