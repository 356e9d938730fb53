// sluice._sluice's Publisher: a version's tensors published to the weight store from Python.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <map>
#include <optional>

#include "actor/publisher.hpp"
#include "bindings.hpp"
#include "common.hpp"
#include "core/cuda_device.hpp"
#include "loop_thread.hpp"
#include "tensors.hpp"

namespace sluice::python {

namespace {

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
    close_on_loop(lt_, publisher_, beat_, store_, engine_,
                  [t](actor::Publisher& p) { return p.close(t); });
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

}  // namespace

void bind_publisher(py::module_& m) {
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
}

}  // namespace sluice::python
