// libFuzzer target: every message of the weight store's protocol, requests and replies. The
// first input byte picks the decoder, the rest is the JSON body; one descriptor frame comes with
// it. A message that decodes re-encodes to one that decodes again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "core/json_limits.hpp"
#include "weightstore/protocol.hpp"

namespace ws = sluice::weightstore;

namespace {

sluice::core::Message message(const nlohmann::json& body) {
  sluice::core::Message m("store.fuzz");
  m.body = body;
  m.blobs.push_back("descriptor");
  return m;
}

// Decoders whose result re-encodes as it came.
template <typename Decode>
void round_trip(const sluice::core::Message& m, Decode decode) {
  auto r = decode(m);
  if (!r.is_ok()) return;
  auto again = decode(ws::encode(*r));
  if (!again.is_ok()) std::abort();
}

// Decoders of a shape several requests share: re-encoded through one of those requests.
template <typename Out, typename Decode>
void round_trip_as(const sluice::core::Message& m, Decode decode) {
  auto r = decode(m);
  if (!r.is_ok()) return;
  using Base = std::decay_t<decltype(*r)>;
  Out out;
  static_cast<Base&>(out) = *r;
  if (!decode(ws::encode(out)).is_ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto j = sluice::core::parse_json_bounded(text, sluice::core::JsonLimits{});
  if (!j.is_ok() || !j->is_object()) return 0;
  const sluice::core::Message m = message(*j);
  auto one = [](auto fn) { return [fn](const sluice::core::Message& x) { return fn(x, {}); }; };
  switch (data[0] % 20) {
    case 0:
      round_trip(m, one(ws::decode_put_manifest));
      break;
    case 1:
      round_trip(m, one(ws::decode_registration));
      break;
    case 2:
      round_trip(m, one(ws::decode_add_chunks));
      break;
    case 3:
      round_trip(m, one(ws::decode_heartbeat));
      break;
    case 4:
      round_trip_as<ws::Unpublish>(m, one(ws::decode_copy_ref));
      break;
    case 5:
      round_trip(m, one(ws::decode_latest_request));
      break;
    case 6:
      round_trip(m, one(ws::decode_plan_request));
      break;
    case 7:
      round_trip_as<ws::Renew>(m, ws::decode_lease_ref);
      break;
    case 8:
      round_trip_as<ws::Pin>(m, one(ws::decode_pin_ref));
      break;
    case 9:
      round_trip(m, one(ws::decode_retained_request));
      break;
    case 10:
      round_trip(m, one(ws::decode_join_relay));
      break;
    case 11:
      round_trip(m, one(ws::decode_chain_source_request));
      break;
    case 12:
      round_trip_as<ws::HoldersRequest>(m, one(ws::decode_version_ref));
      break;
    case 13:
      round_trip(m, ws::decode_committed);
      break;
    case 14:
      round_trip(m, ws::decode_drained);
      break;
    case 15:
      round_trip(m, ws::decode_latest);
      break;
    case 16:
      round_trip(m, one(ws::decode_retained));
      break;
    case 17:
      round_trip(m, one(ws::decode_chain_source));
      break;
    case 18:
      round_trip(m, one(ws::decode_copies));
      break;
    default:
      round_trip(m, one(ws::decode_holders));
      break;
  }
  return 0;
}
