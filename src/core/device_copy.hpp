// Weights in GPU memory: copies between CUDA device tensors and the host image of a version
// (the bytes a manifest describes, tensor after tensor), chunk by chunk on several CUDA streams.
//
// UCX without CUDA support (Debian's) cannot read or write device memory, so a version travels
// through host memory: a publisher copies its device tensors into a registered host buffer
// (to_host, each chunk handed on to be checksummed as soon as it has landed), and a reader copies
// each chunk into its device tensors as soon as the chunk has been verified (enqueue_to_device,
// from ReadOptions::on_chunk; wire/device_read.hpp puts the two together). Copies from and to
// page-locked (pinned) host memory run asynchronously and overlap each other on the streams, the
// network, and the checksums on the CPU; PinnedHost (RegisteredBuffer::pin_for_device()) pins
// host memory in place.
//
// Built with or without CUDA (device_copy.cpp / device_copy_none.cpp). Without CUDA, or without
// a device, every call that needs one fails with failed_precondition saying so; nothing crashes.
//
// Thread safety: device_pointer(), device_chunk_checksum() and DeviceLayout are safe from any
// thread. A DeviceCopier belongs to one thread at a time (the loop thread, when a read feeds it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/checksum.hpp"
#include "core/status.hpp"

namespace sluice::core {

// What CUDA says a pointer is. Managed (unified) memory counts as host memory: the CPU may read
// and write it, so the host paths serve it as they are.
struct DevicePointer {
  bool device = false;  // CUDA device memory (cudaMemoryTypeDevice)
  int ordinal = -1;     // its device, when `device`
};
// Never fails: host memory, a null pointer, a build without CUDA and a machine without a device
// all answer {false, -1}.
DevicePointer device_pointer(const void* p);

// XXH3 of `bytes` of device memory (chunk_checksum), computed on the host after copying them
// through a page-locked buffer of the calling thread. failed_precondition without CUDA; internal
// with the CUDA error when the copy fails.
Result<std::uint64_t> device_chunk_checksum(const void* device_data, std::size_t bytes);
// chunk_sums of `bytes` of device memory, copied to the host the same way. (The digest is not
// taken on the device here, core/device_digest.hpp: SHA-256 of a chunk is one GPU thread's work,
// seconds for a 64 MiB chunk, where the copy and OpenSSL on one core take tens of milliseconds;
// the device pays only with many chunks in flight at once.)
Result<ChunkSums> device_chunk_sums(const void* device_data, std::size_t bytes, SumKind kind);

// Device memory this object owns (cudaMalloc on `device`, cudaFree when it goes): for tools,
// tests and benchmarks that need device memory without including CUDA. Not copyable.
class DeviceBuffer {
 public:
  // failed_precondition without CUDA or without that device; internal with CUDA's error (out of
  // memory, say).
  static Result<std::unique_ptr<DeviceBuffer>> allocate(int device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  int device() const { return device_; }

 private:
  DeviceBuffer() = default;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = 0;
};

// Host memory page-locked for CUDA (cudaHostRegister) for the life of this object, so that copies
// to and from it run asynchronously at full speed (from pageable memory CUDA copies through a
// bounce buffer of its own, synchronously). The memory must outlive the pin, and no copy may
// still use it when the pin goes. Memory CUDA already treats as page-locked (cudaMallocHost, or
// pinned by someone else) is accepted as it is and left alone. For a RegisteredBuffer use
// RegisteredBuffer::pin_for_device(), which ties the pin to the buffer's life.
class PinnedHost {
 public:
  // failed_precondition without CUDA or a device; internal with CUDA's error.
  static Result<std::unique_ptr<PinnedHost>> pin(void* host, std::size_t bytes);
  ~PinnedHost();
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;

 private:
  PinnedHost() = default;
  void* host_ = nullptr;  // null when the memory was page-locked already
};

// One device tensor and the part of the host image it mirrors: host image bytes
// [offset, offset + bytes) are the tensor's bytes [data, data + bytes).
struct DeviceSpan {
  void* data = nullptr;  // device memory
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

// Device tensors laid over a host image of `host_bytes`: sorted by offset, not overlapping, each
// inside the image. Pure bookkeeping (no CUDA): make() checks the layout, for_range() finds what
// a range of the image touches.
class DeviceLayout {
 public:
  // invalid_argument for an empty span (null data or no bytes), one outside the image, or two
  // that overlap in the image. Spans may come in any order.
  static Result<DeviceLayout> make(std::vector<DeviceSpan> spans, std::uint64_t host_bytes);
  DeviceLayout() = default;

  const std::vector<DeviceSpan>& spans() const { return spans_; }
  std::uint64_t host_bytes() const { return host_bytes_; }
  // Calls f(device address, host image offset, bytes) for each part of a span inside
  // [offset, offset + bytes), in image order.
  void for_range(std::uint64_t offset, std::uint64_t bytes,
                 const std::function<void(void*, std::uint64_t, std::uint64_t)>& f) const;
  // Where the image starts in device memory when the spans tile all of it back to back in one
  // allocation (span i's data is base + its offset): then the image can be registered and read
  // as one device buffer. nullopt otherwise.
  std::optional<void*> contiguous_base() const;

 private:
  std::vector<DeviceSpan> spans_;
  std::uint64_t host_bytes_ = 0;
};

struct DeviceCopyOptions {
  int device = 0;  // the CUDA device whose tensors are copied (>= 0)
  // CUDA streams the chunks are spread over, round robin: copies of different chunks overlap
  // each other (and both directions overlap) on the GPU's copy engines. 1 to 32; default 4.
  unsigned streams = 4;
  // The chunk grid of the host image: to_host() reports chunks of this size (the manifest's
  // chunk size, so that each one can be checksummed as it lands). Default 8 MiB, > 0.
  std::uint64_t chunk_bytes = 8u << 20;
  // Chunks to_host() keeps in flight before it waits for the oldest one. Default 16, >= 1.
  unsigned window = 16;
};

// Copies between device tensors (a DeviceLayout) and a host image, on streams of its own.
// Not copyable, not movable. The destructor waits for the copies in flight (errors logged).
class DeviceCopier {
 public:
  // failed_precondition when built without CUDA or when options.device does not exist;
  // invalid_argument for options out of range.
  static Result<std::unique_ptr<DeviceCopier>> create(DeviceCopyOptions options);
  ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  const DeviceCopyOptions& options() const { return options_; }

  // Checks that every span of `layout` is device memory on this copier's device
  // (invalid_argument naming the span otherwise). to_host() and to_device() check themselves;
  // call it once before a series of enqueue_to_device().
  Status check(const DeviceLayout& layout) const;

  // Device -> host: copies every span into host + offset, chunk by chunk over the streams, and
  // calls on_chunk(k) on this thread for each chunk k of the image's chunk grid, in order, once
  // every byte of it has landed (host bytes no span covers are left as they are). Returns after
  // the last chunk, or at the first error (chunks not reported may be partly copied).
  Status to_host(const DeviceLayout& layout, std::uint8_t* host,
                 const std::function<void(std::uint64_t chunk)>& on_chunk = {});

  // Host -> device, incremental: queues the copies of image bytes [offset, offset + bytes) into
  // the spans that cover them and returns at once. The host bytes must stay unchanged, and the
  // tensors unused, until synchronize() returns. Copies of one call go on one stream; successive
  // calls take the streams in turn.
  Status enqueue_to_device(const DeviceLayout& layout, const std::uint8_t* host,
                           std::uint64_t offset, std::uint64_t bytes);
  // Waits until every queued copy has landed; the first error of any of them (internal, with the
  // CUDA error). After an error the tensors' contents are undefined.
  Status synchronize();
  // The whole image, chunk by chunk over the streams, then synchronize().
  Status to_device(const DeviceLayout& layout, const std::uint8_t* host);

  struct Impl;

 private:
  explicit DeviceCopier(DeviceCopyOptions options);
  DeviceCopyOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
