// libFuzzer target: the chunk stream's wire format (src/wire/chunk_stream.hpp), as a holder
// decodes a reader's request and a reader decodes a holder's reply header. The first bytes are
// read as a request, the next as a reply header, any rest as a region size. A decoded message
// encodes back to the same bytes; a range judged inside a region really is inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "wire/chunk_stream.hpp"

namespace wire = sluice::core::chunk_wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::size_t req_n = size < wire::kRequestBytes ? size : wire::kRequestBytes;
  auto req = wire::decode_request(data, req_n);
  std::uint64_t region = 1 << 20;
  if (size > wire::kRequestBytes + wire::kReplyBytes) {
    region = 0;
    const std::size_t rest = size - wire::kRequestBytes - wire::kReplyBytes;
    std::memcpy(&region, data + wire::kRequestBytes + wire::kReplyBytes, rest < 8 ? rest : 8);
  }
  if (req.is_ok()) {
    if (req_n != wire::kRequestBytes) std::abort();
    std::uint8_t again[wire::kRequestBytes];
    wire::encode_request(*req, again);
    if (std::memcmp(again, data, wire::kRequestBytes) != 0) std::abort();
    if (wire::range_inside(region, req->offset, req->length)) {
      // Inside means: not empty, and the last byte (computed without wrapping) within the region.
      if (req->length == 0 || req->offset >= region || req->length - 1 > region - 1 - req->offset)
        std::abort();
    }
  }
  if (size >= wire::kRequestBytes) {
    const std::size_t rest = size - wire::kRequestBytes;
    auto h = wire::decode_reply_header(data + wire::kRequestBytes,
                                       rest < wire::kReplyBytes ? rest : wire::kReplyBytes);
    if (h.is_ok()) {
      if (h->status != wire::kOk && h->length != 0) std::abort();
      std::uint8_t again[wire::kReplyBytes];
      wire::encode_reply_header(*h, again);
      if (std::memcmp(again, data + wire::kRequestBytes, wire::kReplyBytes) != 0) std::abort();
    }
  }
  return 0;
}
