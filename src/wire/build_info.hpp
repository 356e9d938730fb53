// What this binary was built with: version, protocol, optional features.
//
// Thread safety: constant data.
#pragma once

#include <string>

namespace sluice::core {

struct BuildInfo {
  std::string version;       // "0.1.0"
  int protocol_version = 0;  // the control-plane wire version
  bool cuda = false;         // CUDA paths compiled in
  bool nccl = false;         // NCCL found and linked
  std::string sanitizer;     // "none", "address", ...
  std::string ucx_version;   // the UCX library loaded at run time
  std::string zmq_version;   // the libzmq loaded at run time
};

BuildInfo build_info();

}  // namespace sluice::core
