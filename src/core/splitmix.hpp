// SplitMix64 (Steele, Lea and Flood, 2014), written out once: its finaliser, a cheap bijective
// 64-bit mix with good avalanche that turns a hash or a counter into independent-looking bits,
// and the generator built on it. Written out rather than taken from <random> because the
// standard distributions are implementation-defined, and what sluice derives from these (prompts,
// sampling states, synthetic weights) must be the same on every platform and standard library.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace sluice::core {

// The generator's step between states (2^64 over the golden ratio).
inline constexpr std::uint64_t kSplitMixGamma = 0x9e3779b97f4a7c15ULL;

// The finaliser.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The generator: advances `state` and returns the next draw.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  return mix64(state += kSplitMixGamma);
}

}  // namespace sluice::core
