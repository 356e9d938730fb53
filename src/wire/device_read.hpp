// Pulling a version into GPU memory: a read of wire/transfer.hpp whose destination is device
// tensors (a DeviceLayout over the version's host image).
//
// Two paths, chosen per read:
// - direct: this process's UCX can register CUDA memory (TransferEngine::cuda_memory()) and the
//   tensors tile the image back to back in one allocation (DeviceLayout::contiguous_base()):
//   the chunks are read straight into device memory (TransferEngine::wrap_device) and verified
//   through the host.
// - staged (otherwise, and always with Debian's UCX, which has no CUDA support): the chunks are
//   read into a registered host buffer, and each one is queued for copying into the device
//   tensors as soon as it has been verified (ReadOptions::on_chunk), on the copier's streams. The
//   copies overlap the network and the checksums; once the read's last chunk has arrived, what
//   is left is about one chunk's copy. Pin the staging buffer once beforehand
//   (RegisteredBuffer::pin_for_device()): copies from unpinned memory are synchronous and slower.
//
// Thread safety: loop thread only (the engine's). The engine, the copier, `staging` and the
// device tensors must outlive the read (until `done` has run).
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "core/device_copy.hpp"
#include "core/event_loop.hpp"
#include "wire/transfer.hpp"

namespace sluice::core {

enum class DevicePath { kAuto, kStaged, kDirect };
std::string_view device_path_name(DevicePath path);  // "auto", "staged", "direct"

// The path kAuto takes for `layout` with `engine`.
DevicePath choose_device_path(const TransferEngine& engine, const DeviceLayout& layout);

struct DeviceReadStats {
  ReadStats read;  // the transfer itself (its seconds end when the last chunk was verified)
  DevicePath path = DevicePath::kStaged;  // the path taken
  double seconds = 0;                     // from the start until every byte was in device memory
  double tail_seconds = 0;  // of those, after the last chunk was verified (the last copies)
};

// Reads `chunks` (dst_offset: offsets in the image) from `sources` into the tensors of `layout`;
// `done` runs exactly once, on the loop thread (`loop`, the engine's). `staging`: a registered host
// buffer of at least layout.host_bytes(), needed by the staged path (it may be null when the direct
// one is asked for); after a staged read it holds the verified image too. options.on_chunk, when
// set, is called as well (after the chunk's copy is queued). Errors: the read's; invalid_argument
// for a layout whose tensors are not on the copier's device, a missing or too small staging buffer,
// or kDirect for tensors that are not one contiguous allocation; failed_precondition for kDirect
// when UCX cannot register CUDA memory; internal with CUDA's error when a copy fails (the tensors'
// contents are then undefined). `done` never runs inside this call.
void read_into_device(EventLoop& loop, TransferEngine& engine, DeviceCopier& copier,
                      std::vector<ReadSource> sources, std::vector<ChunkRead> chunks,
                      const DeviceLayout& layout, RegisteredBuffer* staging, ReadOptions options,
                      DevicePath path, std::function<void(Result<DeviceReadStats>)> done);

// Blocking form for tools and tests: runs `loop` (the engine's) until done. Never from a loop
// callback.
Result<DeviceReadStats> read_into_device_sync(EventLoop& loop, TransferEngine& engine,
                                              DeviceCopier& copier, std::vector<ReadSource> sources,
                                              std::vector<ChunkRead> chunks,
                                              const DeviceLayout& layout, RegisteredBuffer* staging,
                                              ReadOptions options,
                                              DevicePath path = DevicePath::kAuto);

}  // namespace sluice::core
