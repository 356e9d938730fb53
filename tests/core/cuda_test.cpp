#include <doctest/doctest.h>

#include "core/cuda_device.hpp"

using namespace sluice::core;

TEST_SUITE("core.cuda") {
  TEST_CASE("host-device round trip returns the same bytes (skipped without a GPU)") {
    auto devs = cuda_devices();
    if (devs.count == 0) {
      MESSAGE("skipped: no CUDA device (" << devs.why_none << ")");
      CHECK(cuda_roundtrip_check(1024).code() == Code::kFailedPrecondition);
      return;
    }
    Status s = cuda_roundtrip_check(64u << 20);
    CHECK_MESSAGE(s.is_ok(), s.to_string());
  }
}
