// libFuzzer target: a signed manifest as it arrives in store.put_manifest, store.register or a
// read plan (JSON text with a "signature"). Whatever the bytes, decoding returns a manifest or
// an error. A manifest it returns keeps its signature and its signed bytes through JSON and back;
// a signature checks only for the exact manifest it was made for (any field changed, it fails);
// and no input verifies under the fuzzer's key unless it is that key's signature of that very
// manifest (the seed corpus holds one that is).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/json_limits.hpp"
#include "format/manifest.hpp"

namespace {

using sluice::core::Manifest;

// A fixed key, so that the seed corpus can hold a valid signature: its seed is 32 bytes of 0x5a.
const sluice::core::SignKeyPair& fuzz_key() {
  static const sluice::core::SignKeyPair k = [] {
    std::string seed;
    for (int i = 0; i < 32; ++i)
      seed += "5a";
    return sluice::core::sign_key_pair_from_seed(seed).value();
  }();
  return k;
}

bool verifies(const Manifest& m) {
  return sluice::core::check_signature(m, {fuzz_key().public_key}).is_ok();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = sluice::core::parse_json_bounded(text, sluice::core::JsonLimits{});
  if (!j.is_ok()) return 0;
  auto m = Manifest::from_json(*j);
  if (!m.is_ok()) return 0;

  // Through JSON and back: the same signature over the same signed bytes.
  auto again = Manifest::from_json(m->to_json());
  if (!again.is_ok() || again->signature != m->signature ||
      again->signed_bytes() != m->signed_bytes() || verifies(*again) != verifies(*m)) {
    std::abort();
  }

  // Signed by the key, it verifies; each field changed, it no longer does.
  Manifest s = *m;
  if (!sluice::core::sign_manifest(s, fuzz_key()).is_ok() || !verifies(s)) std::abort();
  // The input's own signature verifies only if it is that very signature (Ed25519 is
  // deterministic, and the hex spelling is canonical).
  if (!m->signature.empty() && verifies(*m) != (m->signature == s.signature)) std::abort();
  std::vector<Manifest> changed(5, s);
  changed[0].version ^= 1;
  changed[1].model += "x";
  changed[2].chunk_bytes ^= 1;
  changed[3].tensors[0].name += "x";
  if (!changed[4].checksums.empty()) {
    changed[4].checksums.back() ^= 1;
  } else {
    changed[4].total_bytes ^= 1;
  }
  for (const auto& c : changed) {
    if (verifies(c)) std::abort();
  }
  return 0;
}
