#include "rollout/protocol.hpp"

#include <fmt/format.h>

#include <string_view>

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

// Reads the fields of one JSON object, each error naming the message and the field.
class Fields {
 public:
  Fields(const json& j, std::string where, const DecodeLimits& lim)
      : j_(j), where_(std::move(where)), lim_(lim) {}

  core::Status object() const {
    if (!j_.is_object()) return err("", "not an object");
    return {};
  }
  core::Status err(std::string_view key, std::string_view what) const {
    return core::protocol_error(key.empty() ? fmt::format("{}: {}", where_, what)
                                            : fmt::format("{}: '{}': {}", where_, key, what));
  }
  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  core::Result<std::uint64_t> u64(const char* key, std::optional<std::uint64_t> dflt,
                                  std::uint64_t max = UINT64_MAX) const {
    const json* v = find(key);
    if (!v) {
      if (dflt) return *dflt;
      return err(key, "missing");
    }
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0)) {
      return err(key, "not an unsigned integer");
    }
    std::uint64_t x = v->get<std::uint64_t>();
    if (x > max) return err(key, fmt::format("{} is beyond the bound {}", x, max));
    return x;
  }
  core::Result<bool> boolean(const char* key, bool dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    if (!v->is_boolean()) return err(key, "not a boolean");
    return v->get<bool>();
  }
  core::Result<std::string> id(const char* key, bool required) const {
    const json* v = find(key);
    if (!v) {
      if (required) return err(key, "missing");
      return std::string();
    }
    return id_value(*v, key);
  }
  core::Result<std::string> id_value(const json& v, std::string_view key) const {
    if (!v.is_string()) return err(key, "not a string");
    const auto& s = v.get_ref<const std::string&>();
    if (s.empty()) return err(key, "empty");
    if (s.size() > lim_.max_id_bytes) {
      return err(key, fmt::format("{} bytes (at most {})", s.size(), lim_.max_id_bytes));
    }
    return s;
  }
  // A list (absent: empty unless required), its size checked before any entry is read.
  core::Result<const json*> list(const char* key, bool required) const {
    static const json kEmpty = json::array();
    const json* v = find(key);
    if (!v) {
      if (required) return err(key, "missing");
      return &kEmpty;
    }
    if (!v->is_array()) return err(key, "not a list");
    if (v->size() > lim_.max_list) {
      return err(key, fmt::format("{} entries (at most {})", v->size(), lim_.max_list));
    }
    return v;
  }
  core::Result<std::vector<std::string>> trajectory_ids(const char* key, bool required) const {
    SLUICE_ASSIGN_OR_RETURN(const json* l, list(key, required));
    std::vector<std::string> out;
    out.reserve(l->size());
    for (std::size_t i = 0; i < l->size(); ++i) {
      std::string k = fmt::format("{}[{}]", key, i);
      SLUICE_ASSIGN_OR_RETURN(std::string s, id_value((*l)[i], k));
      if (!parse_trajectory_id(s)) return err(k, fmt::format("'{}' is not a trajectory id", s));
      out.push_back(std::move(s));
    }
    return out;
  }
  core::Status versions(std::string_view key, const std::vector<std::uint64_t>& vs) const {
    for (auto v : vs) {
      if (v > lim_.max_version) {
        return err(key, fmt::format("version {} is beyond the bound {}", v, lim_.max_version));
      }
    }
    return {};
  }
  core::Result<std::vector<SequenceState>> sequences(const char* key) const {
    SLUICE_ASSIGN_OR_RETURN(const json* l, list(key, false));
    std::vector<SequenceState> out;
    out.reserve(l->size());
    for (std::size_t i = 0; i < l->size(); ++i) {
      std::string k = fmt::format("{}[{}]", key, i);
      auto s = SequenceState::from_json((*l)[i]);
      if (!s.is_ok()) return err(k, s.status().message());
      if (!parse_trajectory_id(s->trajectory_id)) return err(k, "not a trajectory id");
      if (s->trajectory_id.size() > lim_.max_id_bytes) return err(k, "id too long");
      if (s->kv_tokens() > lim_.max_tokens || s->max_new_tokens > lim_.max_tokens) {
        return err(k, fmt::format("more than {} tokens", lim_.max_tokens));
      }
      SLUICE_TRY(versions(k, s->versions));
      out.push_back(std::move(s).value());
    }
    return out;
  }
  core::Result<std::vector<rl::Trajectory>> trajectories(const char* key, bool required) const {
    SLUICE_ASSIGN_OR_RETURN(const json* l, list(key, required));
    std::vector<rl::Trajectory> out;
    out.reserve(l->size());
    for (std::size_t i = 0; i < l->size(); ++i) {
      std::string k = fmt::format("{}[{}]", key, i);
      auto t = rl::Trajectory::from_json((*l)[i]);
      if (!t.is_ok()) return err(k, t.status().message());
      if (!parse_trajectory_id(t->id) || t->id.size() > lim_.max_id_bytes) {
        return err(k, fmt::format("'{}' is not a trajectory id", t->id));
      }
      if (t->prompt_tokens.size() + t->response_tokens.size() > lim_.max_tokens) {
        return err(k, fmt::format("more than {} tokens", lim_.max_tokens));
      }
      SLUICE_TRY(versions(k, t->versions));
      SLUICE_TRY(versions(k, {t->version}));
      out.push_back(std::move(t).value());
    }
    return out;
  }

 private:
  const json& j_;
  std::string where_;
  const DecodeLimits& lim_;
};

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
  return core::Message(msg::kReport, std::move(body));
}

core::Result<ReportRequest> decode_report(const json& body, const DecodeLimits& lim) {
  Fields f(body, msg::kReport, lim);
  SLUICE_TRY(f.object());
  ReportRequest m;
  SLUICE_ASSIGN_OR_RETURN(m.id, f.id("id", true));
  SLUICE_ASSIGN_OR_RETURN(m.incarnation, f.id("incarnation", false));
  SLUICE_ASSIGN_OR_RETURN(m.version, f.u64("version", 0, lim.max_version));
  SLUICE_ASSIGN_OR_RETURN(m.staged, f.u64("staged", 0, lim.max_version));
  SLUICE_ASSIGN_OR_RETURN(m.loading, f.boolean("loading", false));
  SLUICE_ASSIGN_OR_RETURN(m.leaving, f.boolean("leaving", false));
  const json* cap = f.find("capacity");
  if (!cap) return f.err("capacity", "missing");
  Fields c(*cap, std::string(msg::kReport) + ": capacity", lim);
  SLUICE_TRY(c.object());
  SLUICE_ASSIGN_OR_RETURN(std::uint64_t seqs, c.u64("max_sequences", 1, lim.max_list));
  m.capacity.max_sequences = static_cast<std::uint32_t>(seqs);
  SLUICE_ASSIGN_OR_RETURN(m.capacity.max_kv_tokens, c.u64("max_kv_tokens", 1));
  SLUICE_ASSIGN_OR_RETURN(const json* active, f.list("active", true));
  for (std::size_t i = 0; i < active->size(); ++i) {
    const json& a = (*active)[i];
    std::string k = fmt::format("active[{}]", i);
    if (!a.is_array() || a.size() != 2) return f.err(k, "not an [id, kv_tokens] pair");
    SLUICE_ASSIGN_OR_RETURN(std::string tid, f.id_value(a[0], k));
    if (!parse_trajectory_id(tid)) return f.err(k, fmt::format("'{}' is not a trajectory id", tid));
    if (!a[1].is_number_unsigned()) return f.err(k, "kv_tokens is not an unsigned integer");
    m.active.push_back({std::move(tid), a[1].get<std::uint64_t>()});
  }
  SLUICE_ASSIGN_OR_RETURN(m.queued, f.trajectory_ids("queued", true));
  SLUICE_ASSIGN_OR_RETURN(m.finished, f.trajectories("finished", true));
  SLUICE_ASSIGN_OR_RETURN(m.exported, f.sequences("exported"));
  SLUICE_ASSIGN_OR_RETURN(m.partial, f.sequences("partial"));
  SLUICE_ASSIGN_OR_RETURN(m.returned, f.sequences("returned"));
  SLUICE_ASSIGN_OR_RETURN(m.refused, f.sequences("refused"));
  if (const json* s = f.find("stats")) {
    if (!s->is_object()) return f.err("stats", "not an object");
    if (s->size() > 256) return f.err("stats", "more than 256 entries");
    m.stats = *s;
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
  return core::Message(msg::kReport, std::move(body));
}

core::Result<ReportReply> decode_report_reply(const json& body, const DecodeLimits& lim) {
  Fields f(body, reply_name(msg::kReport), lim);
  SLUICE_TRY(f.object());
  ReportReply m;
  SLUICE_ASSIGN_OR_RETURN(m.rejoin, f.boolean("rejoin", false));
  if (m.rejoin) return m;
  SLUICE_ASSIGN_OR_RETURN(m.import, f.sequences("import"));
  SLUICE_ASSIGN_OR_RETURN(m.assign, f.sequences("assign"));
  SLUICE_ASSIGN_OR_RETURN(m.unqueue, f.boolean("unqueue", false));
  SLUICE_ASSIGN_OR_RETURN(m.export_ids, f.trajectory_ids("export", false));
  SLUICE_ASSIGN_OR_RETURN(m.export_kv, f.trajectory_ids("export_kv", false));
  SLUICE_ASSIGN_OR_RETURN(m.abandon, f.trajectory_ids("abandon", false));
  SLUICE_ASSIGN_OR_RETURN(m.abandon_before, f.u64("abandon_before", 0));
  SLUICE_ASSIGN_OR_RETURN(m.load, f.u64("load", 0));
  SLUICE_ASSIGN_OR_RETURN(m.allow_active, f.boolean("allow_active", false));
  if (const json* s = f.find("state")) {
    if (!s->is_string()) return f.err("state", "not a string");
    m.state = s->get<std::string>();
    if (m.state != "run" && m.state != "barrier" && m.state != "idle") {
      return f.err("state", fmt::format("unknown state '{}'", m.state));
    }
  }
  SLUICE_ASSIGN_OR_RETURN(m.done, f.boolean("done", false));
  SLUICE_ASSIGN_OR_RETURN(m.latest, f.u64("latest", 0));
  return m;
}

core::Message encode(const CollectRequest& m) {
  json body{{"ack", m.ack}, {"consumed", m.consumed}, {"max", m.max}};
  if (m.have) body["have"] = *m.have;
  if (m.epoch) body["epoch"] = *m.epoch;
  return core::Message(msg::kCollect, std::move(body));
}

core::Result<CollectRequest> decode_collect(const json& body, const DecodeLimits& lim) {
  Fields f(body, msg::kCollect, lim);
  SLUICE_TRY(f.object());
  CollectRequest m;
  SLUICE_ASSIGN_OR_RETURN(m.ack, f.trajectory_ids("ack", false));
  if (f.find("have")) {
    SLUICE_ASSIGN_OR_RETURN(m.have, f.trajectory_ids("have", true));
  }
  SLUICE_ASSIGN_OR_RETURN(m.consumed, f.u64("consumed", 0));
  SLUICE_ASSIGN_OR_RETURN(m.max, f.u64("max", 256, lim.max_list));
  if (f.find("epoch")) {
    SLUICE_ASSIGN_OR_RETURN(m.epoch, f.id("epoch", true));
  }
  return m;
}

core::Message encode(const CollectReply& m) {
  return core::Message(msg::kCollect,
                       json{{"trajectories", to_json_list(m.trajectories)}, {"done", m.done}});
}

core::Result<CollectReply> decode_collect_reply(const json& body, const DecodeLimits& lim) {
  Fields f(body, reply_name(msg::kCollect), lim);
  SLUICE_TRY(f.object());
  CollectReply m;
  SLUICE_ASSIGN_OR_RETURN(m.trajectories, f.trajectories("trajectories", true));
  SLUICE_ASSIGN_OR_RETURN(m.done, f.boolean("done", false));
  return m;
}

core::Message encode(const PublishedRequest& m) {
  return core::Message(msg::kPublished, json{{"version", m.version}, {"consumed", m.consumed}});
}

core::Result<PublishedRequest> decode_published(const json& body, const DecodeLimits& lim) {
  Fields f(body, msg::kPublished, lim);
  SLUICE_TRY(f.object());
  PublishedRequest m;
  SLUICE_ASSIGN_OR_RETURN(m.version, f.u64("version", std::nullopt, lim.max_version));
  SLUICE_ASSIGN_OR_RETURN(m.consumed, f.u64("consumed", 0));
  return m;
}

core::Message encode(const PublishedReply& m) {
  return core::Message(msg::kPublished, json{{"latest", m.latest}});
}

core::Result<PublishedReply> decode_published_reply(const json& body, const DecodeLimits& lim) {
  Fields f(body, reply_name(msg::kPublished), lim);
  SLUICE_TRY(f.object());
  PublishedReply m;
  SLUICE_ASSIGN_OR_RETURN(m.latest, f.u64("latest", std::nullopt));
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

core::Result<ManagerStatus> decode_status(const json& body, const DecodeLimits& lim) {
  Fields f(body, reply_name(msg::kStatus), lim);
  SLUICE_TRY(f.object());
  ManagerStatus m;
  SLUICE_ASSIGN_OR_RETURN(m.done, f.boolean("done", false));
  SLUICE_ASSIGN_OR_RETURN(m.latest, f.u64("latest", 0));
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
