// libFuzzer target: the messaging layer's envelope and header, as a server receives them. The
// input is split into frames at each 0xFF byte (the first is the envelope). A message that
// decodes re-encodes to frames that decode to the same type and blobs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "wire/messaging.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> frames(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0xFF) {
      frames.emplace_back();
    } else {
      frames.back().push_back(static_cast<char>(data[i]));
    }
  }
  namespace c = sluice::core;
  auto env = c::decode_envelope(frames[0]);
  c::MessagingLimits lim;
  lim.max_header_bytes = 64 << 10;
  auto msg = c::decode_message(frames, lim);
  if (!env.is_ok() || !msg.is_ok()) return 0;
  // Re-encoding may lengthen the header ("1e15" prints as "1000000000000000.0"): the second
  // decode allows for that.
  c::MessagingLimits wide = lim;
  wide.max_header_bytes = 16 * lim.max_header_bytes;
  auto again = c::decode_message(c::encode_frames(*env, *msg), wide);
  if (!again.is_ok() || again->type != msg->type || again->blobs != msg->blobs) std::abort();
  return 0;
}
