// CUDA runtime errors as sluice Status values, for the files built with CUDA only (device_copy,
// nccl_fanout). Not a public header: it includes the CUDA runtime's.
//
// Thread safety: pure function (cudaGetLastError clears the calling thread's last error).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/status.hpp"

namespace sluice::core {

// ok for cudaSuccess; otherwise internal, naming `what` and CUDA's message. A non-sticky error is
// cleared so that it does not surface again in a later, unrelated call.
inline Status cuda_check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return {};
  cudaGetLastError();
  return internal_error("cuda: " + what + ": " + cudaGetErrorString(e));
}

}  // namespace sluice::core
