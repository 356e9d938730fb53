// libFuzzer target: every message of the rollout manager's protocol. The first input byte picks
// the decoder, the rest is the JSON body. A decoded request re-encodes to a body that decodes
// again (what the manager and its clients rely on).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/json_limits.hpp"
#include "rollout/protocol.hpp"

namespace {

template <typename Decode>
void round_trip(const nlohmann::json& body, Decode decode) {
  auto m = decode(body, sluice::rollout::DecodeLimits{});
  if (!m.is_ok()) return;
  auto again = decode(sluice::rollout::encode(*m).body, sluice::rollout::DecodeLimits{});
  if (!again.is_ok()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto j = sluice::core::parse_json_bounded(text, sluice::core::JsonLimits{});
  if (!j.is_ok()) return 0;
  namespace r = sluice::rollout;
  switch (data[0] % 7) {
    case 0:
      round_trip(*j, r::decode_report);
      break;
    case 1:
      round_trip(*j, r::decode_report_reply);
      break;
    case 2:
      round_trip(*j, r::decode_collect);
      break;
    case 3:
      round_trip(*j, r::decode_collect_reply);
      break;
    case 4:
      round_trip(*j, r::decode_published);
      break;
    case 5:
      round_trip(*j, r::decode_published_reply);
      break;
    default:
      round_trip(*j, r::decode_status);
      break;
  }
  return 0;
}
