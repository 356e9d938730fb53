// Weight versions for tests of the publish and pull path: seeded bytes for each version, and the
// two tensors they are published as ("layer0.weight", F32, the first half; "layer1.weight", U8,
// the rest), so that a test can check names, dtypes and bytes after a round trip.
#pragma once

#include <cstdint>
#include <vector>

#include "actor/publisher.hpp"
#include "core/units.hpp"

namespace sluice::testing {

inline std::vector<std::uint8_t> weights(std::uint64_t version, std::size_t bytes) {
  std::vector<std::uint8_t> w(bytes);
  core::fill_pseudo_random(w.data(), w.size(), version * 1000 + 1);
  return w;
}

inline std::vector<actor::TensorView> views(const std::vector<std::uint8_t>& w) {
  std::uint64_t half = (w.size() / 2) & ~std::uint64_t{3};  // whole F32 elements
  return {{"layer0.weight", "F32", {half / 4}, w.data(), half},
          {"layer1.weight", "U8", {w.size() - half}, w.data() + half, w.size() - half}};
}

}  // namespace sluice::testing
