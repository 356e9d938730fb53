// The helpers every binding file shares (common.hpp).
#include "common.hpp"

#include <cstdint>
#include <map>
#include <vector>

#include "core/config.hpp"

extern char** environ;

namespace sluice::python {

namespace {

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  return env;
}

}  // namespace

void check(const core::Status& s) {
  if (!s.is_ok()) throw StatusError{s};
}

core::Millis millis(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("a timeout must be >= 0 seconds");
  return core::Millis(static_cast<std::int64_t>(seconds * 1000.0));
}

core::SecurityConfig security_config(const py::object& sec) {
  core::SecurityConfig sc;
  if (sec.is_none()) {
    sc.mode = "plain";
    return sc;
  }
  auto d = sec.cast<std::map<std::string, std::string>>();
  for (const auto& [k, v] : d) {
    if (k == "mode")
      sc.mode = v;
    else if (k == "key_file")
      sc.key_file = v;
    else if (k == "members_file")
      sc.members_file = v;
    else
      throw py::value_error("security: unknown key '" + k + "' (mode, key_file, members_file)");
  }
  return sc;
}

std::string connect_store(core::EventLoop& loop, const core::SecurityConfig& sc,
                          const std::string& who, const std::string& holder_id,
                          const std::string& fallback, const std::string& stream_encryption,
                          const std::string& store, double timeout,
                          std::unique_ptr<core::TransferEngine>& engine,
                          std::unique_ptr<weightstore::StoreClient>& client) {
  auto sec = value(core::load_security(sc, who));
  core::TransferOptions to;
  to.environment = environment();
  to.stream_reach = store;  // the chunk server binds where the job's hosts reach it
  // The job's stream keys, as its roles have them (no datacenter label): under auto a holder that
  // serves encrypted streams only is read encrypted, and this process's own chunk server takes
  // encrypted readers; "on" serves and reads encrypted streams only.
  check(core::set_stream_security(to, stream_encryption, "", sec, who));
  engine = value(core::TransferEngine::create(loop, to));
  client = value(weightstore::StoreClient::create(loop, store, sec, millis(timeout)));
  if (!holder_id.empty()) return holder_id;
  return sec.curve() ? sec.identity : fallback;
}

std::optional<core::ShardLayout> shard_layout(const py::object& layout) {
  if (layout.is_none()) return std::nullopt;
  if (!py::isinstance<py::dict>(layout)) throw py::type_error("layout: expected a dict or None");
  std::string text = py::str(py::module_::import("json").attr("dumps")(layout));
  auto j = value(core::config::parse_json_text(text, "layout"));
  return value(core::ShardLayout::from_json(nlohmann::json::parse(j.dump())));
}

}  // namespace sluice::python
