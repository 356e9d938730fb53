// The rollout manager's service: decodes and validates each request, hands it to the state
// machine (rollout/manager_state.hpp) with the clock's time, commits the request's durable changes
// and replies; and runs the timers (heartbeats, repack, the free-slot sample).
#include "rollout/manager.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/log.hpp"
#include "rollout/manager_db.hpp"
#include "rollout/manager_state.hpp"
#include "rollout/mode_policy.hpp"
#include "rollout/protocol.hpp"
#include "wire/messaging.hpp"

namespace sluice::rollout {

namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {

// Where free rollout slots go is sampled this often (heartbeats are checked, and a failed commit
// retried, every heartbeat_check_ms).
constexpr Millis kSampleInterval{20};

}  // namespace

// The service: every handler decodes and validates in full before the state machine is touched,
// so a refused request changes nothing.
struct Manager::Impl {
  std::unique_ptr<ManagerState> state;
  std::unique_ptr<core::Server> server;
  std::unique_ptr<core::EventLoop::Timer> tick_timer;
  std::unique_ptr<core::EventLoop::Timer> repack_timer;
  std::unique_ptr<core::EventLoop::Timer> sample_timer;

  core::Result<core::Message> on_report(const core::Message& req) {
    SLUICE_ASSIGN_OR_RETURN(ReportRequest q, decode_report(req.body, state->decode_limits()));
    SLUICE_TRY(state->check_report(q));
    return encode(state->report(std::move(q), Clock::now()));
  }
  core::Result<core::Message> on_collect(const core::Message& req) {
    SLUICE_ASSIGN_OR_RETURN(CollectRequest q, decode_collect(req.body, state->decode_limits()));
    return encode(state->collect(q, Clock::now()));
  }
  core::Result<core::Message> on_published(const core::Message& req) {
    SLUICE_ASSIGN_OR_RETURN(PublishedRequest q, decode_published(req.body, state->decode_limits()));
    return encode(state->published(q));
  }
  json status_json() const { return state->status(Clock::now()).fields; }
  core::Status persist() { return state->commit(); }
  void check_heartbeats() { state->check_heartbeats(Clock::now()); }
  void sample_free_slots() { state->sample_free_slots(Clock::now()); }
  void plan_repack_now() { state->plan_repack(); }
};

core::Result<std::unique_ptr<Manager>> Manager::create(core::EventLoop& loop,
                                                       ManagerConfig config) {
  SLUICE_TRY(config.validate());
  const std::string listen = config.listen;
  const std::string mode = config.mode;
  const std::uint64_t repack_interval_ms = config.repack_interval_ms;
  const Millis check_interval(config.heartbeat_check_ms);
  std::unique_ptr<ManagerDb> db;
  if (!config.state_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(db, ManagerDb::open(config.state_path));
  }
  auto impl = std::make_unique<Impl>();
  SLUICE_ASSIGN_OR_RETURN(core::Security security,
                          core::load_security(config.security, "rollout-manager"));
  SLUICE_ASSIGN_OR_RETURN(impl->state,
                          ManagerState::create(std::move(config), std::move(db), Clock::now()));
  SLUICE_ASSIGN_OR_RETURN(impl->server, core::Server::create(loop, listen, security));
  Impl* p = impl.get();
  // Every request's durable changes are committed before its reply is sent.
  auto guard = [p](auto fn) {
    return [fn, p](const core::Message& m) -> core::Result<core::Message> {
      core::Result<core::Message> reply = core::internal_error("unset");
      try {
        reply = fn(m);
      } catch (const std::exception& e) {
        reply = core::protocol_error(fmt::format("{}: {}", m.type, e.what()));
      }
      SLUICE_TRY(p->persist());
      return reply;
    };
  };
  // Who may send what (docs/architecture.md, "Authorization"); in curve mode another role is
  // refused before the handler runs, and nothing changes.
  // A rollout reports only as itself: its rollout id is its authenticated identity.
  auto as_itself = [](const core::Message& m) -> core::Status {
    if (!m.peer.authenticated) return {};
    auto id = m.body.find("id");
    if (id != m.body.end() && id->is_string() && id->get<std::string>() == m.peer.identity)
      return {};
    core::Status no = core::permission_denied(m.peer.identity + " may report only as itself");
    core::count_refusal("owner", m.peer.describe(), m.type + ": " + no.message());
    return no;
  };
  impl->server->on_sync(msg::kReport,
                        [as_itself, report = guard([p](const core::Message& m) {
                                      return p->on_report(m);
                                    })](const core::Message& m) -> core::Result<core::Message> {
                          SLUICE_TRY(as_itself(m));
                          return report(m);
                        },
                        {core::kRoleRollout});
  impl->server->on_sync(msg::kCollect,
                        guard([p](const core::Message& m) { return p->on_collect(m); }),
                        {core::kRoleActor});
  impl->server->on_sync(msg::kPublished,
                        guard([p](const core::Message& m) { return p->on_published(m); }),
                        {core::kRoleActor});
  impl->server->on_sync(msg::kStatus,
                        [p](const core::Message&) -> core::Result<core::Message> {
                          ManagerStatus st;
                          st.fields = p->status_json();
                          st.done = st.fields.value("done", false);
                          st.latest = st.fields.value("latest", std::uint64_t{0});
                          return encode(st);
                        },
                        {});  // any member: the launcher, the actor, tools
  impl->tick_timer = loop.every(check_interval, [p] {
    p->check_heartbeats();
    p->persist().ignore();  // logged; retried with the next request
  });
  impl->sample_timer = loop.every(kSampleInterval, [p] { p->sample_free_slots(); });
  impl->repack_timer = loop.every(Millis(std::max<std::uint64_t>(10, repack_interval_ms)),
                                  [p] { p->plan_repack_now(); });
  log::info("manager: mode {} listening on {}", mode, impl->server->endpoint());
  return std::unique_ptr<Manager>(new Manager(std::move(impl)));
}

Manager::Manager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Manager::~Manager() = default;
const std::string& Manager::endpoint() const {
  return impl_->server->endpoint();
}
bool Manager::done() const {
  return impl_->state->done();
}
std::string Manager::state_digest() const {
  return impl_->state->digest();
}

}  // namespace sluice::rollout
