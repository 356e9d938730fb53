#include "wire/build_info.hpp"

#include <ucp/api/ucp.h>
#include <zmq.h>

#include "wire/messaging.hpp"

namespace sluice::core {

BuildInfo build_info() {
  BuildInfo b;
  b.version = SLUICE_VERSION_STRING;
  b.protocol_version = kProtocolVersion;
  b.cuda = SLUICE_WITH_CUDA != 0;
  b.nccl = SLUICE_WITH_NCCL != 0;
  b.sanitizer = SLUICE_SANITIZER_NAME;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  b.ucx_version =
      std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
  int zmaj = 0, zmin = 0, zpatch = 0;
  zmq_version(&zmaj, &zmin, &zpatch);
  b.zmq_version = std::to_string(zmaj) + "." + std::to_string(zmin) + "." + std::to_string(zpatch);
  return b;
}

}  // namespace sluice::core
