// The chunk stream's wire format (wire/chunk_stream.hpp has the server and the reader that speak
// it), as pure functions shared by both ends and by the fuzz target
// (tests/fuzz/fuzz_chunk_stream.cpp).
//
// Little-endian, one TCP connection per reader and holder; requests are pipelined and answered
// in order:
//   request (48 bytes): "SLCQ", u16 version (2), u16 0, 16-byte region token, u64 offset,
//                       u64 length, u64 request id
//   reply   (32 bytes): "SLCP", u16 version, u16 status (0 ok, 1 unknown region, 2 range
//                       outside the region, 3 this holder serves encrypted streams only), u64
//                       request id, u64 length, u64 0; then `length` bytes when the status is 0.
// Both open as every chunk-stream message does (wire/stream_header.hpp). An encrypted connection
// carries exactly this byte stream inside its records (wire/stream_crypto.hpp).
//
// Thread safety: constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.hpp"
#include "wire/stream_header.hpp"

namespace sluice::core {

inline constexpr std::size_t kStreamTokenBytes = 16;

namespace chunk_wire {
inline constexpr std::size_t kRequestBytes = 48;
inline constexpr std::size_t kReplyBytes = 32;
inline constexpr std::uint16_t kOk = 0;
inline constexpr std::uint16_t kUnknownRegion = 1;
inline constexpr std::uint16_t kOutOfRange = 2;
inline constexpr std::uint16_t kEncryptionRequired = 3;
// Requests in one record of an encrypted connection, at most (a reader keeps at most this many
// in flight, so a holder's buffer of decrypted requests stays this small).
inline constexpr std::size_t kMaxRequestsPerRecord = 64;

struct Request {
  std::string token;  // kStreamTokenBytes
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t id = 0;
};
struct ReplyHeader {
  std::uint16_t status = kOk;
  std::uint64_t id = 0;
  std::uint64_t length = 0;  // payload bytes that follow (0 unless status is kOk)
};

// Writes kRequestBytes to out. The token must be kStreamTokenBytes long.
void encode_request(const Request& r, std::uint8_t* out);
// Exactly kRequestBytes; protocol_error on a bad magic or version, or a non-zero reserved field.
Result<Request> decode_request(const std::uint8_t* p, std::size_t n);
void encode_reply_header(const ReplyHeader& h, std::uint8_t* out);  // kReplyBytes
// Exactly kReplyBytes; protocol_error on a bad magic, version, reserved field or unknown status,
// or a payload length on a refusal.
Result<ReplyHeader> decode_reply_header(const std::uint8_t* p, std::size_t n);
// Whether [offset, offset + length) is a non-empty range inside a region of `size` bytes,
// without overflow.
bool range_inside(std::uint64_t size, std::uint64_t offset, std::uint64_t length);
}  // namespace chunk_wire

}  // namespace sluice::core
