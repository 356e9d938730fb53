// Compiled when CUDA is on and NCCL was found (nccl_fanout_none.cpp otherwise). Every CUDA and
// NCCL call's result is checked and turned into a Status with the library's own error string.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <string>
#include <thread>

#include "core/cuda_device.hpp"
#include "core/cuda_status.hpp"
#include "core/device_copy.hpp"
#include "core/log.hpp"
#include "wire/nccl_fanout.hpp"

namespace sluice::core {

namespace {

// A broadcast's streams are queried this often: a version's copy takes milliseconds or more.
constexpr std::chrono::microseconds kBroadcastPoll{50};

Status nccl_check(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return {};
  return internal_error("nccl: " + what + ": " + ncclGetErrorString(r));
}

}  // namespace

bool nccl_available() {
  return true;
}

struct LocalFanout::Impl {
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;  // one per device
  bool aborted = false;

  ~Impl() {
    for (std::size_t i = 0; i < comms.size(); ++i) {
      if (!comms[i]) continue;
      // An aborted communicator is gone already (its handle is null here).
      Status st = nccl_check(ncclCommDestroy(comms[i]), "destroy a communicator");
      if (!st.is_ok()) log::warn("local fanout: {}", st.to_string());
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      Status st = cuda_check(cudaSetDevice(devices[i]), "select a device");
      if (st.is_ok()) st = cuda_check(cudaStreamDestroy(streams[i]), "destroy a stream");
      if (!st.is_ok()) log::warn("local fanout: {}", st.to_string());
    }
  }

  void abort_all() {
    for (auto& c : comms) {
      if (!c) continue;
      Status st = nccl_check(ncclCommAbort(c), "abort a communicator");
      if (!st.is_ok()) log::warn("local fanout: {}", st.to_string());
      c = nullptr;
    }
    aborted = true;
  }
};

Result<std::unique_ptr<LocalFanout>> LocalFanout::create(std::vector<int> devices) {
  if (devices.size() < 2) return invalid_argument("local fanout: needs at least two devices");
  auto sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return invalid_argument("local fanout: a device is named twice");
  auto present = cuda_devices();
  for (int d : devices) {
    if (d < 0 || d >= present.count) {
      return failed_precondition("local fanout: no CUDA device " + std::to_string(d) +
                                 (present.count == 0
                                      ? " (" + present.why_none + ")"
                                      : " (" + std::to_string(present.count) + " present)"));
    }
  }
  std::unique_ptr<LocalFanout> f(new LocalFanout());
  f->devices_ = devices;
  f->impl_ = std::make_unique<Impl>();
  Impl& impl = *f->impl_;
  impl.devices = devices;
  for (int d : devices) {
    SLUICE_TRY(cuda_check(cudaSetDevice(d), "select device " + std::to_string(d)));
    cudaStream_t s = nullptr;
    SLUICE_TRY(cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                          "create a stream on device " + std::to_string(d)));
    impl.streams.push_back(s);
  }
  impl.comms.assign(devices.size(), nullptr);
  Status st = nccl_check(
      ncclCommInitAll(impl.comms.data(), static_cast<int>(devices.size()), devices.data()),
      "make communicators over " + std::to_string(devices.size()) + " devices");
  if (!st.is_ok()) {
    impl.comms.assign(devices.size(), nullptr);  // none was made
    return st;
  }
  return f;
}

LocalFanout::~LocalFanout() = default;

Status LocalFanout::broadcast(const std::vector<void*>& buffers, std::uint64_t bytes,
                              std::size_t root, Millis timeout) {
  Impl& impl = *impl_;
  if (impl.aborted)
    return failed_precondition("local fanout: aborted after an earlier failure; make a new one");
  if (buffers.size() != devices_.size()) {
    return invalid_argument("local fanout: " + std::to_string(buffers.size()) + " buffers for " +
                            std::to_string(devices_.size()) + " devices");
  }
  if (root >= devices_.size()) return invalid_argument("local fanout: root out of range");
  if (bytes == 0) return {};
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    DevicePointer p = device_pointer(buffers[i]);
    if (!p.device || p.ordinal != devices_[i]) {
      return invalid_argument("local fanout: buffer " + std::to_string(i) +
                              " is not memory of device " + std::to_string(devices_[i]));
    }
  }
  // One thread drives every device: the per-device calls go inside one group, else the first
  // would wait for its peers forever.
  SLUICE_TRY(nccl_check(ncclGroupStart(), "start a group"));
  Status queued;
  for (std::size_t i = 0; i < buffers.size() && queued.is_ok(); ++i) {
    queued = nccl_check(ncclBroadcast(buffers[i], buffers[i], bytes, ncclUint8,
                                      static_cast<int>(root), impl.comms[i], impl.streams[i]),
                        "queue a broadcast on device " + std::to_string(devices_[i]));
  }
  Status ended = nccl_check(ncclGroupEnd(), "end a group");
  if (!queued.is_ok() || !ended.is_ok()) {
    impl.abort_all();
    return !queued.is_ok() ? queued : ended;
  }
  // Wait for every stream, bounded: a hang is a bug, and NCCL reports some failures only
  // through the communicator's asynchronous error.
  const auto deadline = Clock::now() + timeout;
  std::vector<bool> done(buffers.size(), false);
  while (true) {
    bool all = true;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (done[i]) continue;
      Status st = cuda_check(cudaSetDevice(devices_[i]), "select a device");
      cudaError_t q = cudaSuccess;
      if (st.is_ok()) {
        q = cudaStreamQuery(impl.streams[i]);
        if (q == cudaErrorNotReady) {
          cudaGetLastError();
        } else {
          st = cuda_check(q, "broadcast on device " + std::to_string(devices_[i]));
        }
      }
      ncclResult_t async = ncclSuccess;
      if (st.is_ok()) st = nccl_check(ncclCommGetAsyncError(impl.comms[i], &async), "query");
      if (st.is_ok() && async != ncclSuccess && async != ncclInProgress) {
        st = nccl_check(async, "broadcast on device " + std::to_string(devices_[i]));
      }
      if (!st.is_ok()) {
        impl.abort_all();
        return st;
      }
      if (q == cudaSuccess) {
        done[i] = true;
      } else {
        all = false;
      }
    }
    if (all) return {};
    if (Clock::now() >= deadline) {
      impl.abort_all();
      return timeout_error("local fanout: a broadcast of " + std::to_string(bytes) +
                           " bytes did not finish within " + std::to_string(timeout.count()) +
                           " ms (communicators aborted)");
    }
    std::this_thread::sleep_for(kBroadcastPoll);
  }
}

}  // namespace sluice::core
