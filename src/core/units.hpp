// Sizes and rates as people write them: "1GiB", "8MiB", "512KiB", "4096", "1.5GB".
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.hpp"

namespace sluice::core {

// Accepts an integer or decimal with an optional unit: B, KB/MB/GB/TB (powers of 1000),
// KiB/MiB/GiB/TiB (powers of 1024), K/M/G (taken as KiB/MiB/GiB). Case-insensitive.
Result<std::uint64_t> parse_bytes(std::string_view text);

// "1 GiB", "8 MiB", "1.5 KiB", "17 B".
std::string format_bytes(std::uint64_t bytes);

// Fills `bytes` with a deterministic pseudo-random pattern from `seed` (test data for transfers:
// the same seed gives the same bytes in any process).
void fill_pseudo_random(void* data, std::size_t bytes, std::uint64_t seed);

}  // namespace sluice::core
