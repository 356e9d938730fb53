// libFuzzer target: a manifest as it arrives in store.put_manifest or a read plan (JSON text).
// Whatever the bytes, decoding returns a manifest or an error; a manifest it returns is
// consistent (see the checks below) and encodes to JSON that decodes to the same manifest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/json_limits.hpp"
#include "format/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = sluice::core::parse_json_bounded(text, sluice::core::JsonLimits{});
  if (!j.is_ok()) return 0;
  auto m = sluice::core::Manifest::from_json(*j);
  if (!m.is_ok()) return 0;
  auto again = sluice::core::Manifest::from_json(m->to_json());
  if (!again.is_ok() || again->to_json() != m->to_json()) std::abort();
  return 0;
}
