#include "wire/chunk_format.hpp"

#include <algorithm>

#include "core/bytes.hpp"

namespace sluice::core::chunk_wire {

void encode_request(const Request& r, std::uint8_t* out) {
  ByteWriter w(out, kRequestBytes);
  stream_header::write(w, stream_header::kRequestMagic);
  w.u16(0);
  // A token of another length is cut or padded with zeros (the holder then knows no such region).
  const std::size_t token = std::min(r.token.size(), kStreamTokenBytes);
  w.put(r.token.data(), token).zeros(kStreamTokenBytes - token);
  w.u64(r.offset).u64(r.length).u64(r.id);
}

Result<Request> decode_request(const std::uint8_t* p, std::size_t n) {
  SLUICE_TRY(stream_header::check_size("request", n, kRequestBytes));
  ByteReader r(p, n);  // the size is checked: every read below fits
  const bool opening = stream_header::read(r, stream_header::kRequestMagic);
  const std::uint16_t reserved = r.u16();
  if (!opening || reserved != 0)
    return protocol_error("chunk stream request with a bad magic, version or reserved field");
  Request req;
  req.token = std::string(r.view(kStreamTokenBytes));
  req.offset = r.u64();
  req.length = r.u64();
  req.id = r.u64();
  return req;
}

void encode_reply_header(const ReplyHeader& h, std::uint8_t* out) {
  ByteWriter w(out, kReplyBytes);
  stream_header::write(w, stream_header::kReplyMagic);
  w.u16(h.status).u64(h.id).u64(h.length).u64(0);
}

Result<ReplyHeader> decode_reply_header(const std::uint8_t* p, std::size_t n) {
  SLUICE_TRY(stream_header::check_size("reply header", n, kReplyBytes));
  ByteReader r(p, n);  // the size is checked: every read below fits
  const bool opening = stream_header::read(r, stream_header::kReplyMagic);
  ReplyHeader h;
  h.status = r.u16();
  h.id = r.u64();
  h.length = r.u64();
  const std::uint64_t reserved = r.u64();
  if (!opening || reserved != 0)
    return protocol_error("chunk stream reply with a bad magic, version or reserved field");
  if (h.status != kOk && h.status != kUnknownRegion && h.status != kOutOfRange &&
      h.status != kEncryptionRequired)
    return protocol_error("chunk stream reply of unknown status " + std::to_string(h.status));
  if (h.status != kOk && h.length != 0)
    return protocol_error("chunk stream refusal that carries a payload");
  return h;
}

bool range_inside(std::uint64_t size, std::uint64_t offset, std::uint64_t length) {
  return length > 0 && offset <= size && length <= size - offset;
}

}  // namespace sluice::core::chunk_wire
