// The CUDA device, when there is one. Built with or without the CUDA toolkit; without a toolkit
// or without a device the functions say so instead of failing.
//
// Thread safety: any thread.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.hpp"

namespace sluice::core {

struct CudaDevices {
  int count = 0;         // usable devices
  std::string why_none;  // when count == 0: "built without CUDA", "no CUDA driver", ...
};

CudaDevices cuda_devices();

// Copies `bytes` of a pattern host -> device -> host through pinned memory on device 0 and
// compares. Fails with failed_precondition when there is no device.
Status cuda_roundtrip_check(std::size_t bytes);

// Waits, on the host, until the legacy default stream of `device` has run everything queued on
// it. A DLPack producer asked for a tensor on stream 1 (the legacy default stream) queues there a
// wait for the work of its own current stream (an optimizer step still writing the weights), so
// that once this returns the tensor's bytes are final and any stream may read them. The calling
// thread's current device is left as it was. failed_precondition without CUDA.
Status cuda_wait_legacy_stream(int device);

}  // namespace sluice::core
