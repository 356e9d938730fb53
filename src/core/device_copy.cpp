// Compiled when SLUICE_ENABLE_CUDA is on (device_copy_none.cpp otherwise). Every CUDA call's
// result is checked and turned into a Status that carries CUDA's own error string.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <string>

#include "core/checksum.hpp"
#include "core/cuda_device.hpp"
#include "core/cuda_status.hpp"
#include "core/device_copy.hpp"
#include "core/log.hpp"

namespace sluice::core {

namespace {

// A page-locked buffer of one thread, grown as needed, for device_chunk_sums().
struct Bounce {
  void* data = nullptr;
  std::size_t size = 0;
  ~Bounce() {
    // At process exit the CUDA runtime may already be gone (cudaErrorCudartUnloading): nothing
    // left to free then.
    if (data) cudaFreeHost(data);
  }
};

}  // namespace

DevicePointer device_pointer(const void* p) {
  if (!p) return {};
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // no driver, no device: not device memory
    return {};
  }
  if (a.type != cudaMemoryTypeDevice) return {};
  return {true, a.device};
}

Result<ChunkSums> device_chunk_sums(const void* device_data, std::size_t bytes, SumKind kind) {
  if (bytes == 0) return chunk_sums(device_data, 0, kind);
  thread_local Bounce bounce;
  if (bounce.size < bytes) {
    if (bounce.data) {
      SLUICE_TRY(cuda_check(cudaFreeHost(bounce.data), "free the checksum bounce buffer"));
      bounce.data = nullptr;
      bounce.size = 0;
    }
    SLUICE_TRY(cuda_check(cudaMallocHost(&bounce.data, bytes),
                          "allocate a " + std::to_string(bytes) + "-byte checksum bounce buffer"));
    bounce.size = bytes;
  }
  SLUICE_TRY(cuda_check(cudaMemcpy(bounce.data, device_data, bytes, cudaMemcpyDeviceToHost),
                        "copy " + std::to_string(bytes) + " bytes to the host to checksum them"));
  return chunk_sums(bounce.data, bytes, kind);
}

Result<std::uint64_t> device_chunk_checksum(const void* device_data, std::size_t bytes) {
  SLUICE_ASSIGN_OR_RETURN(ChunkSums sums, device_chunk_sums(device_data, bytes, SumKind::checksum));
  return *sums.checksum;
}

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::allocate(int device, std::size_t bytes) {
  if (bytes == 0) return invalid_argument("device buffer: no bytes");
  auto devs = cuda_devices();
  if (devs.count == 0) return failed_precondition("device buffer: " + devs.why_none);
  if (device < 0 || device >= devs.count)
    return failed_precondition("device buffer: no CUDA device " + std::to_string(device));
  SLUICE_TRY(cuda_check(cudaSetDevice(device), "select device " + std::to_string(device)));
  std::unique_ptr<DeviceBuffer> b(new DeviceBuffer());
  b->device_ = device;
  SLUICE_TRY(cuda_check(
      cudaMalloc(&b->data_, bytes),
      "allocate " + std::to_string(bytes) + " bytes on device " + std::to_string(device)));
  b->size_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (!data_) return;
  Status st = cuda_check(cudaSetDevice(device_), "select a device");
  if (st.is_ok()) st = cuda_check(cudaFree(data_), "free device memory");
  if (!st.is_ok()) log::warn("device buffer: {}", st.to_string());
}

Result<std::unique_ptr<PinnedHost>> PinnedHost::pin(void* host, std::size_t bytes) {
  if (!host || bytes == 0) return invalid_argument("pin: no memory");
  auto devs = cuda_devices();
  if (devs.count == 0) return failed_precondition("pin: " + devs.why_none);
  std::unique_ptr<PinnedHost> p(new PinnedHost());
  cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterDefault);
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    cudaGetLastError();
    return p;  // page-locked already (CUDA's allocator, or someone else): theirs to release
  }
  SLUICE_TRY(cuda_check(e, "pin " + std::to_string(bytes) + " bytes of host memory"));
  p->host_ = host;
  return p;
}

PinnedHost::~PinnedHost() {
  if (!host_) return;
  Status st = cuda_check(cudaHostUnregister(host_), "unpin host memory");
  if (!st.is_ok()) log::warn("pinned host memory: {}", st.to_string());
}

struct DeviceCopier::Impl {
  int device = 0;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;  // to_host's window, one per chunk in flight
  unsigned next_stream = 0;
  Status queued_error;  // the first error of enqueue_to_device, until synchronize()

  Status use_device() const {
    return cuda_check(cudaSetDevice(device), "select device " + std::to_string(device));
  }

  // Waits for every stream; the first error.
  Status drain() {
    Status first;
    for (auto s : streams) {
      Status st = cuda_check(cudaStreamSynchronize(s), "wait for a copy stream");
      if (first.is_ok() && !st.is_ok()) first = st;
    }
    return first;
  }

  ~Impl() {
    if (!use_device().is_ok()) return;  // the device is gone; so are its streams
    Status st = drain();
    if (!st.is_ok()) log::warn("device copier: {}", st.to_string());
    for (auto e : events) {
      Status d = cuda_check(cudaEventDestroy(e), "destroy an event");
      if (!d.is_ok()) log::warn("device copier: {}", d.to_string());
    }
    for (auto s : streams) {
      Status d = cuda_check(cudaStreamDestroy(s), "destroy a stream");
      if (!d.is_ok()) log::warn("device copier: {}", d.to_string());
    }
  }
};

DeviceCopier::DeviceCopier(DeviceCopyOptions options) : options_(options) {}

DeviceCopier::~DeviceCopier() = default;

Result<std::unique_ptr<DeviceCopier>> DeviceCopier::create(DeviceCopyOptions options) {
  if (options.device < 0) return invalid_argument("device copier: device must be >= 0");
  if (options.streams < 1 || options.streams > 32)
    return invalid_argument("device copier: streams must be 1 to 32");
  if (options.chunk_bytes == 0) return invalid_argument("device copier: chunk_bytes must be > 0");
  if (options.window < 1) return invalid_argument("device copier: window must be >= 1");
  auto devs = cuda_devices();
  if (devs.count == 0) return failed_precondition("device copier: " + devs.why_none);
  if (options.device >= devs.count) {
    return failed_precondition("device copier: no CUDA device " + std::to_string(options.device) +
                               " (" + std::to_string(devs.count) + " present)");
  }
  std::unique_ptr<DeviceCopier> c(new DeviceCopier(options));
  c->impl_ = std::make_unique<Impl>();
  c->impl_->device = options.device;
  SLUICE_TRY(c->impl_->use_device());
  for (unsigned i = 0; i < options.streams; ++i) {
    cudaStream_t s = nullptr;
    // Non-blocking: the copies do not wait for work on the legacy default stream (a training
    // step's kernels, say), nor it for them.
    SLUICE_TRY(cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "create a stream"));
    c->impl_->streams.push_back(s);
  }
  for (unsigned i = 0; i < options.window; ++i) {
    cudaEvent_t e = nullptr;
    SLUICE_TRY(cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "create an event"));
    c->impl_->events.push_back(e);
  }
  return c;
}

Status DeviceCopier::check(const DeviceLayout& layout) const {
  for (const auto& s : layout.spans()) {
    DevicePointer p = device_pointer(s.data);
    if (!p.device || p.ordinal != options_.device) {
      return invalid_argument(
          "device copier: the tensor at image offset " + std::to_string(s.offset) + " is " +
          (p.device ? "on device " + std::to_string(p.ordinal) : std::string("host memory")) +
          ", not memory of device " + std::to_string(options_.device));
    }
  }
  return {};
}

Status DeviceCopier::to_host(const DeviceLayout& layout, std::uint8_t* host,
                             const std::function<void(std::uint64_t chunk)>& on_chunk) {
  SLUICE_TRY(check(layout));
  SLUICE_TRY(impl_->use_device());
  // Nothing of an earlier series of copies to the device may be left behind.
  if (Status earlier = synchronize(); !earlier.is_ok())
    return earlier.with_context("an earlier copy to the device");
  const std::uint64_t chunk = options_.chunk_bytes;
  const std::uint64_t chunks = (layout.host_bytes() + chunk - 1) / chunk;
  const auto& streams = impl_->streams;
  const auto& events = impl_->events;
  std::deque<std::uint64_t> in_flight;
  // The oldest chunk in flight has landed once its event has: report it.
  auto land_oldest = [&]() -> Status {
    const std::uint64_t k = in_flight.front();
    SLUICE_TRY(cuda_check(cudaEventSynchronize(events[k % events.size()]),
                          "copy chunk " + std::to_string(k) + " to the host"));
    in_flight.pop_front();
    if (on_chunk) on_chunk(k);
    return {};
  };
  Status st;
  for (std::uint64_t k = 0; k < chunks && st.is_ok(); ++k) {
    if (in_flight.size() == events.size()) {
      st = land_oldest();
      if (!st.is_ok()) break;
    }
    cudaStream_t s = streams[k % streams.size()];
    layout.for_range(k * chunk, chunk, [&](void* dev, std::uint64_t off, std::uint64_t n) {
      if (st.is_ok()) {
        st = cuda_check(cudaMemcpyAsync(host + off, dev, n, cudaMemcpyDeviceToHost, s),
                        "queue a copy of " + std::to_string(n) + " bytes to the host");
      }
    });
    if (st.is_ok())
      st = cuda_check(cudaEventRecord(events[k % events.size()], s), "record an event");
    if (st.is_ok()) in_flight.push_back(k);
  }
  while (st.is_ok() && !in_flight.empty())
    st = land_oldest();
  if (!st.is_ok()) {
    // No copy may still be writing into `host` once this returns.
    Status d = impl_->drain();
    if (!d.is_ok()) log::warn("device copier: after a failed copy: {}", d.to_string());
  }
  return st;
}

Status DeviceCopier::enqueue_to_device(const DeviceLayout& layout, const std::uint8_t* host,
                                       std::uint64_t offset, std::uint64_t bytes) {
  if (!impl_->queued_error.is_ok()) return impl_->queued_error;
  Status st = impl_->use_device();
  cudaStream_t s = impl_->streams[impl_->next_stream++ % impl_->streams.size()];
  layout.for_range(offset, bytes, [&](void* dev, std::uint64_t off, std::uint64_t n) {
    if (st.is_ok()) {
      st = cuda_check(cudaMemcpyAsync(dev, host + off, n, cudaMemcpyHostToDevice, s),
                      "queue a copy of " + std::to_string(n) + " bytes to the device");
    }
  });
  if (!st.is_ok()) impl_->queued_error = st;
  return st;
}

Status DeviceCopier::synchronize() {
  Status st = impl_->use_device();
  if (st.is_ok()) st = impl_->drain();
  if (!impl_->queued_error.is_ok()) st = impl_->queued_error;
  impl_->queued_error = Status();
  return st;
}

Status DeviceCopier::to_device(const DeviceLayout& layout, const std::uint8_t* host) {
  SLUICE_TRY(check(layout));
  const std::uint64_t chunk = options_.chunk_bytes;
  Status st;
  for (std::uint64_t off = 0; off < layout.host_bytes() && st.is_ok(); off += chunk)
    st = enqueue_to_device(layout, host, off, chunk);
  Status done = synchronize();  // also after an error: nothing may still read `host`
  return st.is_ok() ? done : st;
}

}  // namespace sluice::core
