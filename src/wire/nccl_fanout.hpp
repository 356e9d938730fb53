// One copy per host, fanned out to the host's GPUs: a version reaches one GPU of a host over the
// network (or through host memory), and NCCL broadcasts it from there to the host's other GPUs
// over NVLink or PCIe, instead of every GPU pulling its own copy across the network.
//
// One process drives every local GPU: the communicators come from ncclCommInitAll over the
// devices, and a broadcast is one ncclBroadcast per device inside an NCCL group.
//
// Built with NCCL when CMake finds it next to the CUDA toolkit (nccl_fanout.cpp), otherwise
// without (nccl_fanout_none.cpp): then create() fails with failed_precondition saying so.
//
// Thread safety: a LocalFanout belongs to one thread at a time. Not copyable, not movable.
#pragma once

#include <memory>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"

namespace sluice::core {

// Whether this build has NCCL (not whether there are GPUs to use it with).
bool nccl_available();

// broadcast()'s default bound: a version's copy over NVLink or PCIe takes well under it.
inline constexpr Millis kBroadcastTimeout{60000};

class LocalFanout {
 public:
  // Communicators over `devices` (CUDA ordinals, at least two, all different). failed_precondition
  // without NCCL, without CUDA, or for a device that is not there; internal with NCCL's error
  // when the communicators cannot be made.
  static Result<std::unique_ptr<LocalFanout>> create(std::vector<int> devices);
  ~LocalFanout();
  LocalFanout(const LocalFanout&) = delete;
  LocalFanout& operator=(const LocalFanout&) = delete;

  const std::vector<int>& devices() const { return devices_; }

  // Copies `bytes` of buffers[root] into every other buffer; buffers[i] is device memory of
  // devices()[i], at least `bytes` long. Returns once every GPU has the bytes. A broadcast that
  // has not finished within `timeout` is aborted (the communicators are then unusable: every
  // later call fails) and reported as timeout; NCCL's asynchronous errors as internal.
  Status broadcast(const std::vector<void*>& buffers, std::uint64_t bytes, std::size_t root = 0,
                   Millis timeout = kBroadcastTimeout);

  struct Impl;

 private:
  LocalFanout() = default;
  std::vector<int> devices_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
