// sluice._sluice: the C++ library as Python sees it (pybind11). The Python package (python/sluice)
// re-exports these classes and adds conveniences (torch tensors out, CUDA tensors staged through
// host memory until the device path lands, role configuration files); see its __init__.pyi.
//
// Every blocking call releases the GIL and ends within its timeout; C++ errors become
// sluice.Error (code: the status code's name), timeouts sluice.TimeoutError, a target that does
// not match a version's manifest sluice.MismatchError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>

#include "actor/publisher.hpp"
#include "core/config.hpp"
#include "core/cuda_device.hpp"
#include "core/device_copy.hpp"
#include "core/log.hpp"
#include "wire/security.hpp"
#include "format/shard.hpp"
#include "wire/transfer.hpp"
#include "loop_thread.hpp"
#include "rl/task.hpp"
#include "rl/tokenizer.hpp"
#include "rl/trajectory.hpp"
#include "rollout/manager_client.hpp"
#include "rollout/protocol.hpp"
#include "tensors.hpp"
#include "weightstore/client.hpp"
#include "weightstore/reader.hpp"

extern char** environ;

namespace sluice::python {

namespace {

using core::Millis;

// A failed Status on its way to Python.
struct StatusError {
  core::Status status;
};
struct MismatchError {
  std::string message;
};

PyObject* g_error = nullptr;
PyObject* g_timeout = nullptr;
PyObject* g_mismatch = nullptr;

void check(const core::Status& s) {
  if (!s.is_ok()) throw StatusError{s};
}
template <class T>
T value(core::Result<T> r) {
  if (!r.is_ok()) throw StatusError{r.status()};
  return std::move(*r);
}

void raise_status(const core::Status& s) {
  PyObject* cls = s.code() == core::Code::kTimeout ? g_timeout : g_error;
  py::object e = py::reinterpret_borrow<py::object>(cls)(s.to_string());
  std::string code(core::code_name(s.code()));  // "not found" -> "not_found"
  for (char& c : code)
    if (c == ' ') c = '_';
  e.attr("code") = code;
  PyErr_SetObject(cls, e.ptr());
}

Millis millis(double seconds) {
  if (!(seconds >= 0)) throw py::value_error("a timeout must be >= 0 seconds");
  return Millis(static_cast<std::int64_t>(seconds * 1000.0));
}

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  return env;
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

std::string random_hex() {
  std::random_device rd;
  std::uint64_t x =
      (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// What a Publisher and a Reader both stand on: this process's security, a transfer engine and a
// store client, made on the object's loop (call from LoopThread::exclusive).
// Returns the holder id to hold under: `holder_id`, or with none given this process's identity
// (curve: a holder id is its member's identity or identity-<suffix>), else `fallback`.
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

// A shard layout from a Python dict (core::ShardLayout::from_json's keys); None: none.
std::optional<core::ShardLayout> shard_layout(const py::object& layout) {
  if (layout.is_none()) return std::nullopt;
  if (!py::isinstance<py::dict>(layout)) throw py::type_error("layout: expected a dict or None");
  std::string text = py::str(py::module_::import("json").attr("dumps")(layout));
  auto j = value(core::config::parse_json_text(text, "layout"));
  return value(core::ShardLayout::from_json(nlohmann::json::parse(j.dump())));
}

// ---------------------------------------------------------------- publisher

class Publisher {
 public:
  Publisher(std::string store, std::string model, std::string holder_id, py::object security,
            std::string stream_encryption, std::uint64_t chunk_bytes, std::uint32_t keep_versions,
            double lease_ttl, double timeout, py::object layouts)
      : model_(std::move(model)) {
    auto sc = security_config(security);
    std::vector<core::ShardLayout> declared;
    if (!layouts.is_none()) {
      for (const auto& l : layouts)
        declared.push_back(*shard_layout(py::reinterpret_borrow<py::object>(l)));
    }
    py::gil_scoped_release nogil;
    lt_.exclusive([&] {
      actor::PublisherOptions po;
      po.holder_id = connect_store(lt_.loop(), sc, "publisher " + holder_id, holder_id, "actor-0",
                                   stream_encryption, store, timeout, engine_, store_);
      po.model = model_;
      po.chunk_bytes = chunk_bytes;
      po.keep_versions = keep_versions;
      po.lease_ttl = millis(lease_ttl);
      po.shard_layouts = std::move(declared);
      publisher_ = value(actor::Publisher::create(lt_.loop(), *engine_, *store_, po));
      beat_ = lt_.loop().every(weightstore::kHolderHeartbeatPeriod,
                               [this] { publisher_->heartbeat(); });
    });
  }
  ~Publisher() {
    try {
      close(5.0);
    } catch (...) {
    }
  }

  void publish(std::uint64_t version, const py::handle& tensors) {
    auto refs = tensor_refs(tensors);
    std::vector<actor::TensorView> views;
    for (const auto& r : refs) {
      // The publisher copies device tensors on CUDA streams; a build without CUDA would read a
      // device address as host memory.
      if (r.cuda && core::cuda_devices().count == 0)
        throw py::value_error("tensor '" + r.name + "' is in CUDA memory and this build has no " +
                              "CUDA device (" + core::cuda_devices().why_none +
                              "): the sluice package copies it to the host first");
      views.push_back({r.name, r.dtype, r.shape, r.data, r.bytes});
    }
    py::gil_scoped_release nogil;
    lt_.exclusive([&] {
      alive();
      if (results_.count(version))
        throw StatusError{core::invalid_argument("version " + std::to_string(version) +
                                                 " was already published here")};
      results_[version] = std::nullopt;
      core::Status s = publisher_->publish_async(version, views,
                                                 [this, version](core::Result<core::Manifest> r) {
                                                   results_[version] = r.status();
                                                   if (r.is_ok())
                                                     committed_ = std::max(committed_, version);
                                                 });
      if (!s.is_ok()) {
        results_.erase(version);
        throw StatusError{s};
      }
    });
  }

  void wait(std::uint64_t version, double timeout) {
    auto t = millis(timeout);
    py::gil_scoped_release nogil;
    lt_.exclusive([&] {
      alive();
      auto it = results_.find(version);
      if (it == results_.end())
        throw StatusError{core::not_found("version " + std::to_string(version) +
                                          " was not published by this publisher")};
      if (!lt_.loop().run_until([&] { return results_[version].has_value(); }, t))
        throw StatusError{core::timeout_error(model_ + "@" + std::to_string(version) +
                                              " not committed within " + std::to_string(t.count()) +
                                              " ms")};
      check(*results_[version]);
    });
  }

  // Even calls that only read take the loop lock, which a blocking call on another thread may
  // hold for seconds: waiting for it with the GIL held would stop every Python thread.
  std::uint64_t committed() {
    py::gil_scoped_release nogil;
    return lt_.exclusive([&] { return committed_; });
  }

  void close(double timeout) {
    auto t = millis(timeout);
    py::gil_scoped_release nogil;
    lt_.exclusive(
        [&] {
          if (!publisher_) return;
          beat_.reset();
          core::Status s = publisher_->close(t);
          publisher_.reset();
          store_.reset();
          engine_.reset();
          check(s);
        },
        true);
  }

 private:
  void alive() const {
    if (!publisher_) throw StatusError{core::failed_precondition("the publisher is closed")};
  }
  LoopThread lt_;  // first: destroyed last, after close() paused it
  std::string model_;
  std::unique_ptr<core::TransferEngine> engine_;
  std::unique_ptr<weightstore::StoreClient> store_;
  std::unique_ptr<actor::Publisher> publisher_;
  std::unique_ptr<core::EventLoop::Timer> beat_;
  std::map<std::uint64_t, std::optional<core::Status>> results_;
  std::uint64_t committed_ = 0;
};

// ---------------------------------------------------------------- reader

struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t nbytes = 0;
};

std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string t = "(";
  for (std::size_t i = 0; i < s.size(); ++i)
    t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// Every difference between `into` and the manifest, or "" when they match. strict: every tensor
// of the manifest must be in `into`.
std::string mismatches(const core::Manifest& m, const std::vector<TensorRef>& into, bool strict) {
  std::map<std::string, const core::TensorSpec*> by_name;
  for (const auto& t : m.tensors)
    by_name[t.name] = &t;
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  std::set<std::string> given;
  for (const auto& r : into) {
    given.insert(r.name);
    auto it = by_name.find(r.name);
    if (it == by_name.end()) {
      add("'" + r.name + "' is not in " + m.model + "@" + std::to_string(m.version));
      continue;
    }
    const auto& t = *it->second;
    if (t.dtype != r.dtype)
      add("'" + r.name + "' is " + t.dtype + " there, " + r.dtype + " here");
    else if (t.shape != r.shape)
      add("'" + r.name + "' has shape " + shape_text(t.shape) + " there, " + shape_text(r.shape) +
          " here");
    else if (t.bytes != r.bytes)
      add("'" + r.name + "' is " + std::to_string(t.bytes) + " bytes there, " +
          std::to_string(r.bytes) + " here");
    if (!r.writable) add("'" + r.name + "' is read-only here");
  }
  if (strict) {
    for (const auto& t : m.tensors)
      if (!given.count(t.name)) add("'" + t.name + "' is missing here");
  }
  return out;
}

class Reader {
 public:
  Reader(std::string store, std::string model, std::string holder_id, py::object security,
         std::string stream_encryption, py::object serve_arg, double timeout, double drain_timeout,
         py::object layout_arg)
      : model_(std::move(model)) {
    auto sc = security_config(security);
    std::optional<core::ShardLayout> layout = shard_layout(layout_arg);
    // A shard reader holds no whole version to serve: it serves only when asked to (and is then
    // refused with the reason).
    const bool serve = serve_arg.is_none() ? !layout : serve_arg.cast<bool>();
    py::gil_scoped_release nogil;
    lt_.exclusive([&] {
      weightstore::ReaderOptions ro;
      ro.holder_id = connect_store(lt_.loop(), sc, "reader " + holder_id, holder_id, "reader-0",
                                   stream_encryption, store, timeout, engine_, store_);
      ro.model = model_;
      ro.serve = serve;
      ro.request_timeout = millis(timeout);
      ro.drain_timeout = millis(drain_timeout);
      ro.layout = layout;
      reader_ = value(weightstore::Reader::create(lt_.loop(), *engine_, *store_, ro));
      if (serve) {
        beat_ =
            lt_.loop().every(weightstore::kHolderHeartbeatPeriod, [this] { reader_->heartbeat(); });
      }
    });
  }
  ~Reader() {
    try {
      close();
    } catch (...) {
    }
  }

  std::uint64_t latest() {
    py::gil_scoped_release nogil;
    return lt_.exclusive([&]() -> std::uint64_t {
      alive();
      auto r = store_->latest(model_);
      if (!r.is_ok() && r.status().code() == core::Code::kNotFound) return 0;
      return value(std::move(r));
    });
  }
  // The GIL is released before the loop lock is taken, as in every call (see committed()).
  std::uint64_t current() {
    py::gil_scoped_release nogil;
    return lt_.exclusive([&] { return reader_ ? reader_->current_version() : 0; });
  }
  std::uint64_t staged() {
    py::gil_scoped_release nogil;
    return lt_.exclusive([&] { return reader_ ? reader_->staged_version() : 0; });
  }

  void prefetch(std::uint64_t version) {
    py::gil_scoped_release nogil;
    lt_.exclusive([&] {
      alive();
      auto gen = ++prefetch_gen_;
      prefetched_.reset();
      reader_->pull_version(version, [this, gen](core::Result<std::uint64_t> r) {
        if (gen == prefetch_gen_) prefetched_ = std::move(r);
      });
    });
  }

  // Whether the last prefetch has ended; raises its error.
  bool ready(double timeout) {
    auto t = millis(timeout);
    py::gil_scoped_release nogil;
    return lt_.exclusive([&] {
      alive();
      if (prefetch_gen_ == 0) throw StatusError{core::failed_precondition("nothing prefetched")};
      lt_.loop().run_until([&] { return prefetched_.has_value(); }, t);
      if (!prefetched_) return false;
      check(prefetched_->status());
      return true;
    });
  }

  std::uint64_t pull(std::uint64_t version, const py::object& into, bool strict, double timeout) {
    auto t = millis(timeout);
    std::vector<TensorRef> refs;
    if (!into.is_none()) refs = tensor_refs(into);
    py::gil_scoped_release nogil;
    return lt_.exclusive([&] {
      alive();
      std::uint64_t v = value(reader_->pull(version, t));
      if (v != reader_->current_version()) {
        if (!into.is_none()) check_into(*reader_->staged_manifest(), refs, strict);
        value(reader_->swap());
      }
      copy_current(refs, strict);
      return v;
    });
  }

  std::uint64_t swap(const py::object& into, bool strict) {
    std::vector<TensorRef> refs;
    if (!into.is_none()) refs = tensor_refs(into);
    py::gil_scoped_release nogil;
    return lt_.exclusive([&] {
      alive();
      const core::Manifest* m = reader_->staged_manifest();
      if (!m) throw StatusError{core::failed_precondition("nothing staged to swap in")};
      if (!into.is_none()) check_into(*m, refs, strict);
      std::uint64_t v = value(reader_->swap());
      copy_current(refs, strict);
      return v;
    });
  }

  void copy_into(const py::object& into, bool strict) {
    auto refs = tensor_refs(into);
    py::gil_scoped_release nogil;
    lt_.exclusive([&] {
      alive();
      copy_current(refs, strict);
    });
  }

  std::vector<TensorInfo> tensors() {
    py::gil_scoped_release nogil;  // TensorInfo holds no Python object
    return lt_.exclusive([&] {
      std::vector<TensorInfo> out;
      const core::Manifest* m = reader_ ? reader_->current_manifest() : nullptr;
      if (m)
        for (const auto& t : m->tensors)
          out.push_back({t.name, t.dtype, t.shape, t.bytes});
      return out;
    });
  }

  py::bytes tensor_bytes(const std::string& name) {
    std::string copy;
    {
      py::gil_scoped_release nogil;
      copy = lt_.exclusive([&] {
        alive();
        auto span = value(reader_->current_tensor(name));
        return std::string(reinterpret_cast<const char*>(span.data()), span.size());
      });
    }
    return py::bytes(copy);
  }

  // What the last staged version cost: bytes read (as the transfer engine counted them), the
  // whole version's bytes, and whether a shard was read as whole chunks (undeclared layout).
  py::dict last_read() {
    std::uint64_t bytes = 0, version_bytes = 0;
    bool whole = false;
    {
      py::gil_scoped_release nogil;
      lt_.exclusive([&] {
        alive();
        bytes = reader_->last_stats().bytes;
        version_bytes = reader_->last_version_bytes();
        whole = reader_->last_read_whole_chunks();
      });
    }
    py::dict d;
    d["bytes"] = bytes;
    d["version_bytes"] = version_bytes;
    d["whole_chunks"] = whole;
    return d;
  }

  void close() {
    py::gil_scoped_release nogil;
    lt_.exclusive(
        [&] {
          if (!reader_) return;
          beat_.reset();
          core::Status s = reader_->close();
          reader_.reset();
          store_.reset();
          engine_.reset();
          check(s);
        },
        true);
  }

 private:
  void alive() const {
    if (!reader_) throw StatusError{core::failed_precondition("the reader is closed")};
  }
  static void check_into(const core::Manifest& m, const std::vector<TensorRef>& refs, bool strict) {
    std::string bad = mismatches(m, refs, strict);
    if (!bad.empty()) throw MismatchError{"nothing written: " + bad};
  }
  void copy_current(const std::vector<TensorRef>& refs, bool strict) {
    if (refs.empty()) return;
    const core::Manifest* m = reader_->current_manifest();
    if (!m) throw StatusError{core::failed_precondition("no current version to copy from")};
    check_into(*m, refs, strict);
    std::map<int, std::vector<core::DeviceSpan>> device_spans;  // per CUDA device
    for (const auto& r : refs) {
      auto span = value(reader_->current_tensor(r.name));
      if (!r.cuda) {
        std::memcpy(r.data, span.data(), span.size());
        continue;
      }
      if (core::cuda_devices().count == 0)
        throw py::value_error("tensor '" + r.name + "' is in CUDA memory and this build has no " +
                              "CUDA device: the sluice package stages it through host memory");
      auto offset = static_cast<std::uint64_t>(span.data() - reader_->current_bytes().data());
      device_spans[r.device].push_back({r.data, offset, span.size()});
    }
    // Device tensors: chunk by chunk on CUDA streams from the current version's host image.
    for (auto& [device, spans] : device_spans) {
      auto layout = value(core::DeviceLayout::make(std::move(spans), m->total_bytes));
      core::DeviceCopyOptions o;
      o.device = device;
      o.chunk_bytes = m->chunk_bytes;
      auto copier = value(core::DeviceCopier::create(o));
      check(copier->to_device(layout, reader_->current_bytes().data()));
    }
  }

  LoopThread lt_;
  std::string model_;
  std::unique_ptr<core::TransferEngine> engine_;
  std::unique_ptr<weightstore::StoreClient> store_;
  std::unique_ptr<weightstore::Reader> reader_;
  std::unique_ptr<core::EventLoop::Timer> beat_;
  std::uint64_t prefetch_gen_ = 0;
  std::optional<core::Result<std::uint64_t>> prefetched_;
};

// ---------------------------------------------------------------- manager clients

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

// ---------------------------------------------------------------- the arithmetic task

std::vector<rl::Token> tokens_of(const std::vector<std::int64_t>& v) {
  std::vector<rl::Token> out;
  out.reserve(v.size());
  for (auto t : v) {
    if (t < 0 || t >= rl::Tokenizer::kVocabSize)
      throw py::value_error("token " + std::to_string(t) + " is outside the vocabulary");
    out.push_back(static_cast<rl::Token>(t));
  }
  return out;
}

// A prompt given as token ids from Python; errors raise as value() raises them.
rl::Prompt prompt_of(const std::vector<std::int64_t>& prompt_tokens) {
  return value(rl::ArithmeticTask::parse_prompt(tokens_of(prompt_tokens)));
}

rl::ArithmeticTask make_task(const py::object& config) {
  rl::TaskConfig tc;
  if (!config.is_none()) {
    std::string text = py::str(py::module_::import("json").attr("dumps")(config));
    auto j = value(core::config::parse_json_text(text, "task"));
    check(core::config::parse(j, tc));
  }
  return value(rl::ArithmeticTask::create(tc));
}

}  // namespace

PYBIND11_MODULE(_sluice, m) {
  m.doc() = "sluice's C++ library (see the sluice package for the documented API)";
  g_error = PyErr_NewException("sluice.Error", PyExc_RuntimeError, nullptr);
  {
    py::tuple bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_TimeoutError));
    g_timeout = PyErr_NewException("sluice.TimeoutError", bases.ptr(), nullptr);
    py::tuple mb = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
    g_mismatch = PyErr_NewException("sluice.MismatchError", mb.ptr(), nullptr);
  }
  m.attr("Error") = py::handle(g_error);
  m.attr("TimeoutError") = py::handle(g_timeout);
  m.attr("MismatchError") = py::handle(g_mismatch);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      raise_status(e.status);
    } catch (const MismatchError& e) {
      py::object ex = py::reinterpret_borrow<py::object>(g_mismatch)(e.message);
      ex.attr("code") = "mismatch";
      PyErr_SetObject(g_mismatch, ex.ptr());
    }
  });

  m.def(
      "cuda_devices", [] { return core::cuda_devices().count; },
      "CUDA devices this build can copy to and from (0: none, or built without CUDA)");
  m.def(
      "set_log_level",
      [](const std::string& level) { core::log::set_level(value(core::log::parse_level(level))); },
      py::arg("level"), "trace, debug, info, warn, error or off (stderr)");

  py::class_<Publisher>(m, "Publisher")
      .def(py::init<std::string, std::string, std::string, py::object, std::string, std::uint64_t,
                    std::uint32_t, double, double, py::object>(),
           py::arg("store"), py::arg("model"), py::kw_only(), py::arg("holder_id") = "",
           py::arg("security") = py::none(), py::arg("stream_encryption") = "auto",
           py::arg("chunk_bytes") = 8u << 20, py::arg("keep_versions") = 2,
           py::arg("lease_ttl") = 10.0, py::arg("timeout") = 10.0, py::arg("layouts") = py::none())
      .def("publish", &Publisher::publish, py::arg("version"), py::arg("tensors"))
      .def("wait", &Publisher::wait, py::arg("version"), py::arg("timeout") = 60.0)
      .def("committed", &Publisher::committed)
      .def("close", &Publisher::close, py::arg("timeout") = 30.0);

  py::class_<TensorInfo>(m, "TensorInfo")
      .def_readonly("name", &TensorInfo::name)
      .def_readonly("dtype", &TensorInfo::dtype)
      .def_property_readonly("shape",
                             [](const TensorInfo& t) {
                               py::tuple s(t.shape.size());
                               for (std::size_t i = 0; i < t.shape.size(); ++i)
                                 s[i] = t.shape[i];
                               return s;
                             })
      .def_readonly("nbytes", &TensorInfo::nbytes)
      .def("__repr__", [](const TensorInfo& t) {
        return "TensorInfo(" + t.name + ", " + t.dtype + ", " + shape_text(t.shape) + ")";
      });

  py::class_<Reader>(m, "Reader")
      .def(py::init<std::string, std::string, std::string, py::object, std::string, py::object,
                    double, double, py::object>(),
           py::arg("store"), py::arg("model"), py::kw_only(), py::arg("holder_id") = "",
           py::arg("security") = py::none(), py::arg("stream_encryption") = "auto",
           py::arg("serve") = py::none(), py::arg("timeout") = 10.0,
           py::arg("drain_timeout") = 30.0, py::arg("layout") = py::none())
      .def("last_read", &Reader::last_read)
      .def("latest", &Reader::latest)
      .def_property_readonly("current", &Reader::current)
      .def_property_readonly("staged", &Reader::staged)
      .def("prefetch", &Reader::prefetch, py::arg("version") = 0)
      .def("ready", &Reader::ready, py::arg("timeout") = 0.0)
      .def("pull", &Reader::pull, py::arg("version") = 0, py::arg("into") = py::none(),
           py::arg("strict") = true, py::arg("timeout") = 60.0)
      .def("swap", &Reader::swap, py::arg("into") = py::none(), py::arg("strict") = true)
      .def("copy_into", &Reader::copy_into, py::arg("into"), py::arg("strict") = true)
      .def("tensors", &Reader::tensors)
      .def("tensor_bytes", &Reader::tensor_bytes, py::arg("name"))
      .def("close", &Reader::close);

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

  py::class_<rl::ArithmeticTask>(m, "ArithmeticTask")
      .def(py::init(&make_task), py::arg("config") = py::none())
      .def_property_readonly_static("vocab_size",
                                    [](py::object) { return rl::Tokenizer::kVocabSize; })
      .def_property_readonly_static("pad", [](py::object) { return rl::Tokenizer::kPad; })
      .def_property_readonly_static("bos", [](py::object) { return rl::Tokenizer::kBos; })
      .def_property_readonly_static("eos", [](py::object) { return rl::Tokenizer::kEos; })
      .def_property_readonly("max_prompt_tokens", &rl::ArithmeticTask::max_prompt_tokens)
      .def_property_readonly("max_response_tokens", &rl::ArithmeticTask::max_response_tokens)
      .def(
          "train_prompt",
          [](const rl::ArithmeticTask& t, std::uint64_t i) {
            auto p = value(t.train_prompt(i));
            return py::make_tuple(p.id, p.text, p.tokens);
          },
          py::arg("index"))
      .def(
          "heldout_prompt",
          [](const rl::ArithmeticTask& t, std::uint64_t i) {
            auto p = value(t.heldout_prompt(i));
            return py::make_tuple(p.id, p.text, p.tokens);
          },
          py::arg("index"))
      .def(
          "solution",
          [](const rl::ArithmeticTask& t, const std::vector<std::int64_t>& prompt) {
            return t.solution(prompt_of(prompt));
          },
          py::arg("prompt_tokens"))
      .def(
          "reward",
          [](const rl::ArithmeticTask& t, const std::vector<std::int64_t>& prompt,
             const std::vector<std::int64_t>& response) {
            return t.reward(prompt_of(prompt), tokens_of(response));
          },
          py::arg("prompt_tokens"), py::arg("response"))
      .def(
          "correct",
          [](const rl::ArithmeticTask& t, const std::vector<std::int64_t>& prompt,
             const std::vector<std::int64_t>& response) {
            return t.correct(prompt_of(prompt), tokens_of(response));
          },
          py::arg("prompt_tokens"), py::arg("response"))
      .def_static(
          "decode",
          [](const std::vector<std::int64_t>& tokens) {
            return rl::Tokenizer::decode(tokens_of(tokens));
          },
          py::arg("tokens"))
      .def_static(
          "encode", [](const std::string& text) { return value(rl::Tokenizer::encode(text)); },
          py::arg("text"));
}

}  // namespace sluice::python
