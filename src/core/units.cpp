#include "core/units.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstring>

#include "core/splitmix.hpp"

namespace sluice::core {

Result<std::uint64_t> parse_bytes(std::string_view text) {
  std::string t;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  auto bad = [&] {
    return invalid_argument("'" + std::string(text) +
                            "' is not a size (examples: 4096, 64KiB, 8MiB, 1GiB, 1.5GB)");
  };
  std::size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.'))
    ++i;
  if (i == 0) return bad();
  double number = 0;
  try {
    std::size_t used = 0;
    number = std::stod(t.substr(0, i), &used);
    if (used != i) return bad();
  } catch (...) {
    return bad();
  }
  std::string unit;
  for (std::size_t k = i; k < t.size(); ++k)
    unit += static_cast<char>(std::tolower(t[k]));
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kib")
    mult = 1024.0;
  else if (unit == "m" || unit == "mib")
    mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    mult = 1e3;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "tb")
    mult = 1e12;
  else
    return bad();
  double v = number * mult;
  if (v > 1.8e19 || v != std::floor(v)) return bad();
  return static_cast<std::uint64_t>(v);
}

std::string format_bytes(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  if (v == std::floor(v)) return fmt::format("{:.0f} {}", v, units[u]);
  return fmt::format("{:.2f} {}", v, units[u]);
}

void fill_pseudo_random(void* data, std::size_t bytes, std::uint64_t seed) {
  // splitmix64: fast, and good enough to make every chunk's bytes distinct.
  std::uint64_t x = seed * kSplitMixGamma + 1;
  auto* p = static_cast<unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const std::uint64_t z = splitmix64(x);
    std::memcpy(p + i, &z, 8);
  }
  if (i < bytes) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    std::memcpy(p + i, &z, bytes - i);
  }
}

}  // namespace sluice::core
