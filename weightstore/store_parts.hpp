// Private to store.cpp and store_chain.cpp: small helpers both use, each written once. Not part of
// the weight store's contract (store.hpp is).
//
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::weightstore::store_parts {

// "model@7", as messages name a version.
inline std::string vname(const std::string& model, std::uint64_t v) {
  return model + "@" + std::to_string(v);
}

// Whether a copy holds every chunk.
inline bool all_set(const std::vector<bool>& chunks) {
  return std::all_of(chunks.begin(), chunks.end(), [](bool b) { return b; });
}

}  // namespace sluice::weightstore::store_parts
