// Where the reference model's matrix products (kernels::sgemm, hence every linear layer and the
// attention products of forward, backward, prefill and decode) run: on the CPU with OpenBLAS, the
// default, or on CUDA device 0 with cuBLAS. Everything else (LayerNorm, GELU, softmax, sampling,
// AdamW) stays on the CPU either way, and the model's buffers stay in host memory.
//
// The CUDA path is a correctness path, not a speed path: every product copies its operands to the
// device and its result back, so operands cross PCIe on every call. It exists to run the same
// model on a GPU and compare, and as the seed of a real GPU backend.
//
// The choice is process-wide. Make it at start-up, before any model runs (the `sluice actor` and
// `sluice rollout` roles do it from their `device` settings); switching while a product is in
// flight on another thread gives that product either device, which is harmless but undefined as
// to which. Each thread that computes on CUDA gets its own cuBLAS handle and device scratch, kept
// until the thread exits.
//
// Thread safety: any thread; see above for when to call use_device().
#pragma once

#include <string_view>

#include "core/status.hpp"

namespace sluice::model {

enum class Device { kCpu, kCuda };

// "cpu" or "cuda"; anything else is invalid_argument naming the value.
core::Result<Device> parse_device(std::string_view name);
// "cpu" or "cuda".
std::string_view device_name(Device device);

// From now on kernels::sgemm runs on `device`. kCpu always succeeds. kCuda fails with
// failed_precondition, leaving the choice unchanged, when this build has no CUDA
// (SLUICE_ENABLE_CUDA off) or there is no usable device (the message says which and why), or when
// cuBLAS cannot start on the calling thread. Once kCuda is in force, a CUDA or cuBLAS failure
// inside a product aborts the process with a message: kernels::sgemm cannot return an error, and
// a wrong product must never pass silently.
core::Status use_device(Device device);
Device current_device();

}  // namespace sluice::model
