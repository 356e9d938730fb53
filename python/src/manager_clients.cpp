// sluice._sluice's manager clients (Generator, TrainerClient) and what they carry.
#include <pybind11/pybind11.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <random>

#include "bindings.hpp"
#include "common.hpp"
#include "rl/trajectory.hpp"
#include "rollout/manager_client.hpp"
#include "rollout/protocol.hpp"

namespace sluice::python {

namespace {

using core::Millis;

std::string random_hex() {
  std::random_device rd;
  std::uint64_t x =
      (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// The manager's typed client with a loop of its own, run only inside its calls (nothing to
// serve); one call at a time.
class ManagerConnection {
 public:
  ManagerConnection(const std::string& manager, const py::object& security, const std::string& who,
                    double timeout) {
    auto sc = security_config(security);
    loop_ = core::EventLoop::create().value();
    auto sec = value(core::load_security(sc, who));
    client_ = value(rollout::ManagerClient::create(*loop_, manager, sec, millis(timeout)));
  }
  // Runs f(client) under the lock; a timeout of 0 in its calls is the client's own.
  template <class F>
  auto with(F f) {
    std::lock_guard<std::mutex> g(mu_);
    return f(*client_);
  }

 private:
  std::unique_ptr<core::EventLoop> loop_;
  std::unique_ptr<rollout::ManagerClient> client_;
  std::mutex mu_;
};

class Generator {
 public:
  Generator(const std::string& manager, std::string rollout_id, py::object security,
            std::uint32_t max_sequences, std::uint64_t max_kv_tokens, double timeout)
      : id_(std::move(rollout_id)),
        incarnation_(random_hex()),
        client_(manager, security, "generator " + id_, timeout) {
    cap_.max_sequences = max_sequences;
    cap_.max_kv_tokens = max_kv_tokens;
  }

  rollout::ReportReply report(std::uint64_t version, std::uint64_t staged, bool loading,
                              const std::vector<rollout::SequenceState>& active,
                              const std::vector<rl::Trajectory>& finished,
                              const std::vector<rollout::SequenceState>& exported,
                              const std::vector<std::string>& queued,
                              const std::vector<rollout::SequenceState>& partial,
                              const std::vector<rollout::SequenceState>& returned,
                              const std::vector<rollout::SequenceState>& refused, py::dict stats) {
    rollout::ReportRequest q;
    q.id = id_;
    q.incarnation = incarnation_;
    q.version = version;
    q.staged = staged;
    q.loading = loading;
    q.capacity = cap_;
    for (const auto& s : active)
      q.active.push_back({s.trajectory_id, s.kv_tokens()});
    q.queued = queued;
    q.finished = finished;
    for (auto& t : q.finished)
      if (t.rollout.empty()) t.rollout = id_;
    q.exported = exported;
    q.partial = partial;
    q.returned = returned;
    q.refused = refused;
    q.stats = nlohmann::json::parse(
        std::string(py::str(py::module_::import("json").attr("dumps")(stats))));
    py::gil_scoped_release nogil;
    return value(client_.with([&](rollout::ManagerClient& c) { return c.report(q, Millis(0)); }));
  }

  const std::string& id() const { return id_; }

 private:
  std::string id_;
  std::string incarnation_;
  rollout::Capacity cap_;
  ManagerConnection client_;
};

class TrainerClient {
 public:
  TrainerClient(const std::string& manager, py::object security, double timeout, bool auto_ack)
      : epoch_(random_hex()), auto_ack_(auto_ack), client_(manager, security, "trainer", timeout) {}

  rollout::CollectReply collect(std::uint64_t max, std::uint64_t consumed) {
    py::gil_scoped_release nogil;
    rollout::CollectRequest q;
    q.ack = ack_;
    q.have = have_;
    q.consumed = consumed;
    q.max = max;
    q.epoch = epoch_;
    bool answered = false;
    auto reply =
        client_.with([&](rollout::ManagerClient& c) { return c.collect(q, Millis(0), &answered); });
    // Answered: these were delivered (a failed call keeps them for the next one).
    if (answered) {
      ack_.clear();
      have_.clear();
    }
    auto r = value(std::move(reply));
    for (const auto& t : r.trajectories) {
      have_.push_back(t.id);
      if (auto_ack_) ack_.push_back(t.id);
    }
    return r;
  }
  void ack(const std::vector<std::string>& ids) { ack_.insert(ack_.end(), ids.begin(), ids.end()); }
  std::size_t pending_acks() const { return ack_.size(); }
  std::uint64_t published(std::uint64_t version, std::uint64_t consumed) {
    py::gil_scoped_release nogil;
    return value(client_.with([&](rollout::ManagerClient& c) {
             return c.published(rollout::PublishedRequest{version, consumed}, Millis(0));
           }))
        .latest;
  }

 private:
  std::string epoch_;
  bool auto_ack_;
  std::vector<std::string> have_;
  std::vector<std::string> ack_;
  ManagerConnection client_;
};

}  // namespace

void bind_manager_clients(py::module_& m) {
  py::class_<rollout::SequenceState>(m, "SequenceState")
      .def(py::init<>())
      .def_readwrite("trajectory_id", &rollout::SequenceState::trajectory_id)
      .def_readwrite("prompt_id", &rollout::SequenceState::prompt_id)
      .def_readwrite("prompt_tokens", &rollout::SequenceState::prompt_tokens)
      .def_readwrite("generated", &rollout::SequenceState::generated)
      .def_readwrite("logprobs", &rollout::SequenceState::logprobs)
      .def_readwrite("versions", &rollout::SequenceState::versions)
      .def_readwrite("max_new_tokens", &rollout::SequenceState::max_new_tokens)
      .def_readwrite("rng_state", &rollout::SequenceState::rng_state)
      .def("__repr__", [](const rollout::SequenceState& s) {
        return "SequenceState(" + s.trajectory_id + ", " + std::to_string(s.generated.size()) +
               " of " + std::to_string(s.max_new_tokens) + " tokens)";
      });

  py::class_<rl::Trajectory>(m, "Trajectory")
      .def(py::init<>())
      .def_readwrite("id", &rl::Trajectory::id)
      .def_readwrite("prompt_id", &rl::Trajectory::prompt_id)
      .def_readwrite("version", &rl::Trajectory::version)
      .def_readwrite("versions", &rl::Trajectory::versions)
      .def_readwrite("prompt_tokens", &rl::Trajectory::prompt_tokens)
      .def_readwrite("response_tokens", &rl::Trajectory::response_tokens)
      .def_readwrite("logprobs", &rl::Trajectory::logprobs)
      .def_readwrite("reward", &rl::Trajectory::reward)
      .def_readwrite("rollout", &rl::Trajectory::rollout)
      .def_readwrite("abandoned", &rl::Trajectory::abandoned)
      .def("__repr__", [](const rl::Trajectory& t) {
        return "Trajectory(" + t.id + ", v" + std::to_string(t.version) + ", " +
               std::to_string(t.response_tokens.size()) + " tokens, reward " +
               std::to_string(t.reward) + ")";
      });
  m.def("to_trajectory", &rollout::to_trajectory, py::arg("sequence"), py::arg("reward"),
        py::arg("rollout"));

  py::class_<rollout::ReportReply>(m, "Work")
      .def_readonly("rejoin", &rollout::ReportReply::rejoin)
      .def_readonly("imported", &rollout::ReportReply::import)
      .def_readonly("assign", &rollout::ReportReply::assign)
      .def_readonly("unqueue", &rollout::ReportReply::unqueue)
      .def_readonly("export_ids", &rollout::ReportReply::export_ids)
      .def_readonly("abandon", &rollout::ReportReply::abandon)
      .def_readonly("abandon_before", &rollout::ReportReply::abandon_before)
      .def_readonly("load", &rollout::ReportReply::load)
      .def_readonly("allow_active", &rollout::ReportReply::allow_active)
      .def_readonly("state", &rollout::ReportReply::state)
      .def_readonly("done", &rollout::ReportReply::done)
      .def_readonly("latest", &rollout::ReportReply::latest);

  py::class_<Generator>(m, "Generator")
      .def(py::init<std::string, std::string, py::object, std::uint32_t, std::uint64_t, double>(),
           py::arg("manager"), py::arg("rollout_id"), py::kw_only(),
           py::arg("security") = py::none(), py::arg("max_sequences") = 32,
           py::arg("max_kv_tokens") = 65536, py::arg("timeout") = 10.0)
      .def_property_readonly("id", &Generator::id)
      .def("report", &Generator::report, py::kw_only(), py::arg("version"), py::arg("staged") = 0,
           py::arg("loading") = false, py::arg("active") = std::vector<rollout::SequenceState>{},
           py::arg("finished") = std::vector<rl::Trajectory>{},
           py::arg("exported") = std::vector<rollout::SequenceState>{},
           py::arg("queued") = std::vector<std::string>{},
           py::arg("partial") = std::vector<rollout::SequenceState>{},
           py::arg("returned") = std::vector<rollout::SequenceState>{},
           py::arg("refused") = std::vector<rollout::SequenceState>{},
           py::arg("stats") = py::dict());

  py::class_<rollout::CollectReply>(m, "Batch")
      .def_readonly("trajectories", &rollout::CollectReply::trajectories)
      .def_readonly("done", &rollout::CollectReply::done);

  py::class_<TrainerClient>(m, "TrainerClient")
      .def(py::init<std::string, py::object, double, bool>(), py::arg("manager"), py::kw_only(),
           py::arg("security") = py::none(), py::arg("timeout") = 10.0, py::arg("auto_ack") = true)
      .def("collect", &TrainerClient::collect, py::arg("max") = 256, py::arg("consumed") = 0)
      .def("ack", &TrainerClient::ack, py::arg("ids"))
      .def_property_readonly("pending_acks", &TrainerClient::pending_acks)
      .def("published", &TrainerClient::published, py::arg("version"), py::arg("consumed") = 0);
}

}  // namespace sluice::python
