// The rollout manager's messages, as typed structs over JSON bodies on the core messaging layer
// (the envelope carries the protocol version). Encoded and decoded here only: the manager, the
// rollout worker and the actor's trajectory client share these.
//
//   mgr.report     ReportRequest  -> ReportReply      (a rollout, every report_ms)
//   mgr.collect    CollectRequest -> CollectReply     (the actor)
//   mgr.published  PublishedRequest -> PublishedReply (the actor)
//   mgr.status     StatusRequest  -> ManagerStatus    (the launcher's progress line; read-only)
//
// Decoding validates everything before anything is used: required fields and their types, list
// sizes (checked before elements are read), id lengths and forms, versions within a bound. A
// message that fails gets an error naming the offending field and changes nothing.
//
// Idempotence: every state-changing field is keyed by id (a finished id reported twice counts
// once, a repeated ack is harmless, a published version is a maximum).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/messaging.hpp"
#include "rl/trajectory.hpp"
#include "rollout/engine.hpp"

namespace sluice::rollout {

// The manager's message types, each declared here once (the table above); a reply carries its
// request's type.
namespace msg {
inline constexpr char kReport[] = "mgr.report";
inline constexpr char kCollect[] = "mgr.collect";
inline constexpr char kPublished[] = "mgr.published";
inline constexpr char kStatus[] = "mgr.status";
}  // namespace msg

// Bounds a decoder checks; the manager sets max_version from the newest version it knows.
struct DecodeLimits {
  std::size_t max_list = 65536;      // entries in any one list
  std::size_t max_id_bytes = 256;    // a rollout, trajectory or epoch id
  std::size_t max_tokens = 1 << 20;  // tokens in one sequence
  // Versions named in a request may exceed the newest the manager knows by at most this much (a
  // version it has not heard of yet); anything further is absurd.
  std::uint64_t max_version = UINT64_MAX;
};

struct ActiveEntry {
  std::string trajectory_id;
  std::uint64_t kv_tokens = 0;
};

struct ReportRequest {
  std::string id;           // the rollout
  std::string incarnation;  // random per rollout process ("" from older rollouts)
  std::uint64_t version = 0;
  std::uint64_t staged = 0;
  bool loading = false;
  Capacity capacity;
  std::vector<ActiveEntry> active;
  std::vector<std::string> queued;
  std::vector<rl::Trajectory> finished;
  std::vector<SequenceState> exported;
  std::vector<SequenceState> partial;
  std::vector<SequenceState> returned;
  std::vector<SequenceState> refused;
  nlohmann::json stats = nlohmann::json::object();
  // The rollout leaves the job (SIGTERM, `sluice run --remove`): this report hands back all its
  // work (in-flight states as exported, unstarted ones as returned); the manager gives it to
  // others and forgets the rollout. Absent: false.
  bool leaving = false;
};

struct ReportReply {
  bool rejoin = false;  // declared dead: drop all work and report afresh (nothing else is set)
  std::vector<SequenceState> import;
  std::vector<SequenceState> assign;
  bool unqueue = false;
  std::vector<std::string> export_ids;
  // Of export_ids, those whose KV cache moves with them (the planner found it cheaper than a
  // re-prefill at the destination); an engine without one exports them without. Absent: none.
  std::vector<std::string> export_kv;
  std::vector<std::string> abandon;
  std::uint64_t abandon_before = 0;
  std::uint64_t load = 0;
  bool allow_active = false;
  std::string state = "run";  // run, barrier or idle
  bool done = false;
  std::uint64_t latest = 0;
};

struct CollectRequest {
  std::vector<std::string> ack;  // durable at the actor: forget them
  // Received by the actor: not re-sent to this epoch. Absent: the old protocol (re-sent after
  // resend_ms until acknowledged).
  std::optional<std::vector<std::string>> have;
  std::uint64_t consumed = 0;
  std::uint64_t max = 256;
  std::optional<std::string> epoch;  // a change means a restarted actor: re-send all unacked
};

struct CollectReply {
  std::vector<rl::Trajectory> trajectories;
  bool done = false;
};

struct PublishedRequest {
  std::uint64_t version = 0;
  std::uint64_t consumed = 0;
};

struct PublishedReply {
  std::uint64_t latest = 0;  // the newest version the manager knows after this one
};

struct StatusRequest {};

// The manager's counters and per-rollout view, for progress lines and reports. Only `done` and
// `latest` are read by code; the rest is shown as it is.
struct ManagerStatus {
  bool done = false;
  std::uint64_t latest = 0;
  nlohmann::json fields = nlohmann::json::object();  // everything, `done` and `latest` included
};

core::Message encode(const ReportRequest& m);
core::Message encode(const ReportReply& m);
core::Message encode(const CollectRequest& m);
core::Message encode(const CollectReply& m);
core::Message encode(const PublishedRequest& m);
core::Message encode(const PublishedReply& m);
core::Message encode(const StatusRequest& m);
core::Message encode(const ManagerStatus& m);

core::Result<ReportRequest> decode_report(const nlohmann::json& body, const DecodeLimits& lim = {});
core::Result<ReportReply> decode_report_reply(const nlohmann::json& body,
                                              const DecodeLimits& lim = {});
core::Result<CollectRequest> decode_collect(const nlohmann::json& body,
                                            const DecodeLimits& lim = {});
core::Result<CollectReply> decode_collect_reply(const nlohmann::json& body,
                                                const DecodeLimits& lim = {});
core::Result<PublishedRequest> decode_published(const nlohmann::json& body,
                                                const DecodeLimits& lim = {});
core::Result<PublishedReply> decode_published_reply(const nlohmann::json& body,
                                                    const DecodeLimits& lim = {});
core::Result<ManagerStatus> decode_status(const nlohmann::json& body, const DecodeLimits& lim = {});

// Trajectories per message: a report or a collect reply carries finished trajectories up to about
// this many bytes of JSON, the rest in the next one. The messaging layer refuses a header over
// core::MessagingLimits::max_header_bytes (1 MiB), and after an outage a rollout holds (or an
// actor is owed) far more than that: sent in one message, it was refused whole, again and again.
inline constexpr std::size_t kTrajectoryBytesPerMessage = 256u << 10;
// About the size of `t` as JSON (20 bytes a number, plus ids and keys): cheap, never exact.
std::size_t approx_json_bytes(const rl::Trajectory& t);
// How many of `ts`, from the front, fit into kTrajectoryBytesPerMessage (at least one).
std::size_t fitting_prefix(const std::vector<rl::Trajectory>& ts);

// "p<N>/<k>" -> (N, k); nullopt for anything else.
std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_trajectory_id(const std::string& id);

}  // namespace sluice::rollout
