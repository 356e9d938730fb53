// sluice._sluice's Reader and TensorInfo: versions pulled from the weight store into tensors.
#include <pybind11/pybind11.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "bindings.hpp"
#include "common.hpp"
#include "core/cuda_device.hpp"
#include "core/device_copy.hpp"
#include "loop_thread.hpp"
#include "tensors.hpp"
#include "weightstore/reader.hpp"

namespace sluice::python {

namespace {

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
    close_on_loop(lt_, reader_, beat_, store_, engine_,
                  [](weightstore::Reader& r) { return r.close(); });
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

}  // namespace

void bind_reader(py::module_& m) {
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
}

}  // namespace sluice::python
