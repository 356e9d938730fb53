// The store's view of who holds a version of "policy", by holder id (tests' shorthand for
// StoreClient::holders; fails the test if the store does not answer).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>

#include "weightstore/client.hpp"

namespace sluice::testing {

inline std::map<std::string, weightstore::HolderState> holders(weightstore::StoreClient& c,
                                                               std::uint64_t version) {
  std::map<std::string, weightstore::HolderState> out;
  auto hs = c.holders("policy", version);
  REQUIRE_MESSAGE(hs.is_ok(), hs.status().to_string());
  for (auto& h : *hs)
    out[h.holder_id] = h;
  return out;
}

}  // namespace sluice::testing
