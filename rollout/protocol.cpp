#include "rollout/protocol.hpp"

#include <fmt/format.h>

#include <string_view>

#include "core/json_limits.hpp"

namespace sluice::rollout {

using core::reply_name;
using nlohmann::json;

std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_trajectory_id(const std::string& id) {
  auto digits = [](std::string_view d, std::uint64_t& out) {
    if (d.empty() || d.size() > 18 || (d.size() > 1 && d[0] == '0')) return false;
    out = 0;
    for (char c : d) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return true;
  };
  auto slash = id.find('/');
  if (id.size() < 4 || id[0] != 'p' || slash == std::string::npos) return std::nullopt;
  std::string_view v(id);
  std::uint64_t n = 0, k = 0;
  if (!digits(v.substr(1, slash - 1), n) || !digits(v.substr(slash + 1), k)) return std::nullopt;
  return std::pair{n, k};
}

namespace {

namespace f = core::json_field;
using core::Status;

// The manager's own readers, in core::json_field's style: an out-parameter, and a protocol error
// naming the field or the entry ("<what>: 'finished[2]' ...").

// Versions named in a message are within the limits' bound.
Status versions_within(std::string_view what, std::string_view key,
                       const std::vector<std::uint64_t>& vs, const DecodeLimits& lim) {
  for (auto v : vs) {
    if (v > lim.max_version) {
      return f::error(what, key,
                      fmt::format("names version {}, beyond the bound {}", v, lim.max_version));
    }
  }
  return {};
}

// One id of a list, at `key` ("queued[3]").
Status id_entry(const json& v, std::string_view what, std::string_view key, const DecodeLimits& lim,
                std::string& out) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty() ||
      v.get_ref<const std::string&>().size() > lim.max_id_bytes) {
    return f::error(what, key, fmt::format("must be a string of 1 to {} bytes", lim.max_id_bytes));
  }
  out = v.get<std::string>();
  return {};
}

// An entry's key in errors: "finished[2]".
std::string entry_key(const char* key, std::size_t i) {
  return fmt::format("{}[{}]", key, i);
}

Status trajectory_ids(const json& j, std::string_view what, const char* key,
                      const DecodeLimits& lim, std::vector<std::string>& out) {
  return f::list(j, what, key, lim.max_list, out,
                 [&](const json& e, std::size_t i, std::string& id) -> Status {
                   const std::string k = entry_key(key, i);
                   SLUICE_TRY(id_entry(e, what, k, lim, id));
                   if (!parse_trajectory_id(id))
                     return f::error(what, k, fmt::format("'{}' is not a trajectory id", id));
                   return {};
                 });
}

Status sequences(const json& j, std::string_view what, const char* key, const DecodeLimits& lim,
                 std::vector<SequenceState>& out) {
  return f::list(j, what, key, lim.max_list, out,
                 [&](const json& e, std::size_t i, SequenceState& s) -> Status {
                   const std::string k = entry_key(key, i);
                   auto r = SequenceState::from_json(e);
                   if (!r.is_ok()) return f::error(what, k, r.status().message());
                   s = std::move(r).value();
                   if (!parse_trajectory_id(s.trajectory_id))
                     return f::error(what, k, "is not a trajectory id");
                   if (s.trajectory_id.size() > lim.max_id_bytes)
                     return f::error(what, k, "has too long an id");
                   if (s.kv_tokens() > lim.max_tokens || s.max_new_tokens > lim.max_tokens) {
                     return f::error(what, k,
                                     fmt::format("holds more than {} tokens", lim.max_tokens));
                   }
                   return versions_within(what, k, s.versions, lim);
                 });
}

Status trajectories(const json& j, std::string_view what, const char* key, const DecodeLimits& lim,
                    std::vector<rl::Trajectory>& out) {
  return f::list(j, what, key, lim.max_list, out,
                 [&](const json& e, std::size_t i, rl::Trajectory& t) -> Status {
                   const std::string k = entry_key(key, i);
                   auto r = rl::Trajectory::from_json(e);
                   if (!r.is_ok()) return f::error(what, k, r.status().message());
                   t = std::move(r).value();
                   if (!parse_trajectory_id(t.id) || t.id.size() > lim.max_id_bytes) {
                     return f::error(what, k, fmt::format("'{}' is not a trajectory id", t.id));
                   }
                   if (t.prompt_tokens.size() + t.response_tokens.size() > lim.max_tokens) {
                     return f::error(what, k,
                                     fmt::format("holds more than {} tokens", lim.max_tokens));
                   }
                   SLUICE_TRY(versions_within(what, k, t.versions, lim));
                   return versions_within(what, k, {t.version}, lim);
                 });
}

json to_json_list(const std::vector<SequenceState>& v) {
  json out = json::array();
  for (const auto& s : v)
    out.push_back(s.to_json());
  return out;
}

json to_json_list(const std::vector<rl::Trajectory>& v) {
  json out = json::array();
  for (const auto& t : v)
    out.push_back(t.to_json());
  return out;
}

}  // namespace

core::Message encode(const ReportRequest& m) {
  json active = json::array();
  for (const auto& a : m.active)
    active.push_back(json::array({a.trajectory_id, a.kv_tokens}));
  json body{
      {"id", m.id},
      {"incarnation", m.incarnation},
      {"version", m.version},
      {"staged", m.staged},
      {"loading", m.loading},
      {"capacity",
       {{"max_sequences", m.capacity.max_sequences}, {"max_kv_tokens", m.capacity.max_kv_tokens}}},
      {"active", std::move(active)},
      {"queued", m.queued},
      {"finished", to_json_list(m.finished)},
      {"exported", to_json_list(m.exported)},
      {"partial", to_json_list(m.partial)},
      {"returned", to_json_list(m.returned)},
      {"refused", to_json_list(m.refused)},
      {"stats", m.stats}};
  if (m.incarnation.empty()) body.erase("incarnation");
  if (m.leaving) body["leaving"] = true;
  if (!m.waiting.empty()) body["waiting"] = m.waiting;
  return core::Message(msg::kReport, std::move(body));
}

core::Result<ReportRequest> decode_report(const json& body, const DecodeLimits& lim) {
  constexpr std::string_view what = msg::kReport;
  SLUICE_TRY(f::object(body, what));
  ReportRequest m;
  SLUICE_TRY(f::id(body, what, "id", lim.max_id_bytes, m.id));
  if (body.contains("incarnation"))
    SLUICE_TRY(f::id(body, what, "incarnation", lim.max_id_bytes, m.incarnation));
  if (body.contains("version"))
    SLUICE_TRY(f::u64_at_most(body, what, "version", lim.max_version, m.version));
  if (body.contains("staged"))
    SLUICE_TRY(f::u64_at_most(body, what, "staged", lim.max_version, m.staged));
  if (body.contains("loading")) SLUICE_TRY(f::boolean(body, what, "loading", m.loading));
  if (body.contains("leaving")) SLUICE_TRY(f::boolean(body, what, "leaving", m.leaving));
  if (!body.contains("capacity")) return f::error(what, "capacity", "is missing");
  const json& cap = body["capacity"];
  const std::string cap_what = std::string(what) + ": capacity";
  SLUICE_TRY(f::object(cap, cap_what));
  std::uint64_t seqs = 1;  // absent: one sequence, one token (a rollout always sends both)
  m.capacity.max_kv_tokens = 1;
  if (cap.contains("max_sequences"))
    SLUICE_TRY(f::u64_at_most(cap, cap_what, "max_sequences", lim.max_list, seqs));
  m.capacity.max_sequences = static_cast<std::uint32_t>(seqs);
  if (cap.contains("max_kv_tokens"))
    SLUICE_TRY(f::u64(cap, cap_what, "max_kv_tokens", m.capacity.max_kv_tokens));
  // One [trajectory id, kv_tokens] pair of the active list.
  auto active_entry = [&](const json& a, std::size_t i, ActiveEntry& e) -> Status {
    const std::string k = entry_key("active", i);
    if (!a.is_array() || a.size() != 2) return f::error(what, k, "must be an [id, kv_tokens] pair");
    SLUICE_TRY(id_entry(a[0], what, k, lim, e.trajectory_id));
    if (!parse_trajectory_id(e.trajectory_id))
      return f::error(what, k, fmt::format("'{}' is not a trajectory id", e.trajectory_id));
    if (!a[1].is_number_unsigned())
      return f::error(what, k, "kv_tokens must be a non-negative integer");
    e.kv_tokens = a[1].get<std::uint64_t>();
    return {};
  };
  SLUICE_TRY(f::list(body, what, "active", lim.max_list, m.active, active_entry));
  SLUICE_TRY(trajectory_ids(body, what, "queued", lim, m.queued));
  if (body.contains("waiting")) SLUICE_TRY(trajectory_ids(body, what, "waiting", lim, m.waiting));
  SLUICE_TRY(trajectories(body, what, "finished", lim, m.finished));
  if (body.contains("exported")) SLUICE_TRY(sequences(body, what, "exported", lim, m.exported));
  if (body.contains("partial")) SLUICE_TRY(sequences(body, what, "partial", lim, m.partial));
  if (body.contains("returned")) SLUICE_TRY(sequences(body, what, "returned", lim, m.returned));
  if (body.contains("refused")) SLUICE_TRY(sequences(body, what, "refused", lim, m.refused));
  if (body.contains("stats")) {
    const json& st = body["stats"];
    if (!st.is_object()) return f::error(what, "stats", "must be an object");
    if (st.size() > 256) return f::error(what, "stats", "has more than 256 entries");
    m.stats = st;
  }
  return m;
}

core::Message encode(const ReportReply& m) {
  if (m.rejoin) return core::Message(msg::kReport, json{{"rejoin", true}});
  json body{{"import", to_json_list(m.import)},
            {"assign", to_json_list(m.assign)},
            {"unqueue", m.unqueue},
            {"export", m.export_ids},
            {"abandon", m.abandon},
            {"abandon_before", m.abandon_before},
            {"load", m.load},
            {"allow_active", m.allow_active},
            {"state", m.state},
            {"done", m.done},
            {"latest", m.latest}};
  if (!m.export_kv.empty()) body["export_kv"] = m.export_kv;
  if (!m.continue_ids.empty()) body["continue"] = m.continue_ids;
  return core::Message(msg::kReport, std::move(body));
}

core::Result<ReportReply> decode_report_reply(const json& body, const DecodeLimits& lim) {
  const std::string what = reply_name(msg::kReport);
  SLUICE_TRY(f::object(body, what));
  ReportReply m;
  if (body.contains("rejoin")) SLUICE_TRY(f::boolean(body, what, "rejoin", m.rejoin));
  if (m.rejoin) return m;
  if (body.contains("import")) SLUICE_TRY(sequences(body, what, "import", lim, m.import));
  if (body.contains("continue"))
    SLUICE_TRY(trajectory_ids(body, what, "continue", lim, m.continue_ids));
  if (body.contains("assign")) SLUICE_TRY(sequences(body, what, "assign", lim, m.assign));
  if (body.contains("unqueue")) SLUICE_TRY(f::boolean(body, what, "unqueue", m.unqueue));
  if (body.contains("export")) SLUICE_TRY(trajectory_ids(body, what, "export", lim, m.export_ids));
  if (body.contains("export_kv"))
    SLUICE_TRY(trajectory_ids(body, what, "export_kv", lim, m.export_kv));
  if (body.contains("abandon")) SLUICE_TRY(trajectory_ids(body, what, "abandon", lim, m.abandon));
  if (body.contains("abandon_before"))
    SLUICE_TRY(f::u64(body, what, "abandon_before", m.abandon_before));
  if (body.contains("load")) SLUICE_TRY(f::u64(body, what, "load", m.load));
  if (body.contains("allow_active"))
    SLUICE_TRY(f::boolean(body, what, "allow_active", m.allow_active));
  if (body.contains("state")) {
    SLUICE_TRY(f::string(body, what, "state", m.state));
    if (m.state != "run" && m.state != "barrier" && m.state != "idle") {
      return f::error(what, "state", fmt::format("is the unknown state '{}'", m.state));
    }
  }
  if (body.contains("done")) SLUICE_TRY(f::boolean(body, what, "done", m.done));
  if (body.contains("latest")) SLUICE_TRY(f::u64(body, what, "latest", m.latest));
  return m;
}

core::Message encode(const CollectRequest& m) {
  json body{{"ack", m.ack}, {"consumed", m.consumed}, {"max", m.max}};
  if (m.have) body["have"] = *m.have;
  if (m.epoch) body["epoch"] = *m.epoch;
  return core::Message(msg::kCollect, std::move(body));
}

core::Result<CollectRequest> decode_collect(const json& body, const DecodeLimits& lim) {
  constexpr std::string_view what = msg::kCollect;
  SLUICE_TRY(f::object(body, what));
  CollectRequest m;
  if (body.contains("ack")) SLUICE_TRY(trajectory_ids(body, what, "ack", lim, m.ack));
  if (body.contains("have")) {
    m.have.emplace();
    SLUICE_TRY(trajectory_ids(body, what, "have", lim, *m.have));
  }
  if (body.contains("consumed")) SLUICE_TRY(f::u64(body, what, "consumed", m.consumed));
  if (body.contains("max")) SLUICE_TRY(f::u64_at_most(body, what, "max", lim.max_list, m.max));
  if (body.contains("epoch")) {
    m.epoch.emplace();
    SLUICE_TRY(f::id(body, what, "epoch", lim.max_id_bytes, *m.epoch));
  }
  return m;
}

core::Message encode(const CollectReply& m) {
  return core::Message(msg::kCollect,
                       json{{"trajectories", to_json_list(m.trajectories)}, {"done", m.done}});
}

core::Result<CollectReply> decode_collect_reply(const json& body, const DecodeLimits& lim) {
  const std::string what = reply_name(msg::kCollect);
  SLUICE_TRY(f::object(body, what));
  CollectReply m;
  SLUICE_TRY(trajectories(body, what, "trajectories", lim, m.trajectories));
  if (body.contains("done")) SLUICE_TRY(f::boolean(body, what, "done", m.done));
  return m;
}

core::Message encode(const PublishedRequest& m) {
  return core::Message(msg::kPublished, json{{"version", m.version}, {"consumed", m.consumed}});
}

core::Result<PublishedRequest> decode_published(const json& body, const DecodeLimits& lim) {
  constexpr std::string_view what = msg::kPublished;
  SLUICE_TRY(f::object(body, what));
  PublishedRequest m;
  SLUICE_TRY(f::u64_at_most(body, what, "version", lim.max_version, m.version));
  if (body.contains("consumed")) SLUICE_TRY(f::u64(body, what, "consumed", m.consumed));
  return m;
}

core::Message encode(const PublishedReply& m) {
  return core::Message(msg::kPublished, json{{"latest", m.latest}});
}

core::Result<PublishedReply> decode_published_reply(const json& body, const DecodeLimits&) {
  const std::string what = reply_name(msg::kPublished);
  SLUICE_TRY(f::object(body, what));
  PublishedReply m;
  SLUICE_TRY(f::u64(body, what, "latest", m.latest));
  return m;
}

core::Message encode(const StatusRequest&) {
  return core::Message(msg::kStatus, json::object());
}

core::Message encode(const ManagerStatus& m) {
  json body = m.fields.is_object() ? m.fields : json::object();
  body["done"] = m.done;
  body["latest"] = m.latest;
  return core::Message(msg::kStatus, std::move(body));
}

core::Result<ManagerStatus> decode_status(const json& body, const DecodeLimits&) {
  const std::string what = reply_name(msg::kStatus);
  SLUICE_TRY(f::object(body, what));
  ManagerStatus m;
  if (body.contains("done")) SLUICE_TRY(f::boolean(body, what, "done", m.done));
  if (body.contains("latest")) SLUICE_TRY(f::u64(body, what, "latest", m.latest));
  m.fields = body;
  return m;
}

std::size_t approx_json_bytes(const rl::Trajectory& t) {
  return 256 + t.id.size() + t.prompt_id.size() + t.rollout.size() +
         20 * (t.prompt_tokens.size() + t.response_tokens.size() + t.logprobs.size() +
               t.versions.size());
}

std::size_t fitting_prefix(const std::vector<rl::Trajectory>& ts) {
  std::size_t bytes = 0, n = 0;
  for (const auto& t : ts) {
    bytes += approx_json_bytes(t);
    if (n > 0 && bytes > kTrajectoryBytesPerMessage) break;
    ++n;
  }
  return n;
}

}  // namespace sluice::rollout
