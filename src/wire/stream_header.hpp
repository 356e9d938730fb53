// The opening every chunk-stream message starts with: a 4-byte magic, then the u16 wire version.
// Written and checked here once, for the clear protocol's request and reply
// (wire/chunk_format.hpp) and the encrypted protocol's hello and accept (wire/stream_crypto.hpp).
//
// Thread safety: constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/bytes.hpp"
#include "core/status.hpp"

namespace sluice::core {

// The chunk stream's wire version, clear and encrypted alike.
inline constexpr std::uint16_t kChunkStreamVersion = 2;

namespace stream_header {

inline constexpr std::size_t kMagicBytes = 4;
inline constexpr std::string_view kRequestMagic = "SLCQ";  // reader -> holder, clear
inline constexpr std::string_view kReplyMagic = "SLCP";    // holder -> reader, clear
inline constexpr std::string_view kHelloMagic = "SLCH";    // reader -> holder, opens encryption
inline constexpr std::string_view kAcceptMagic = "SLCA";   // holder -> reader, answers a hello
inline constexpr std::size_t kOpeningBytes = kMagicBytes + 2;

// ok when a message `what` ("request", "hello") is exactly `want` bytes; else protocol_error
// "chunk stream <what> of <n> bytes, not <want>". Decoders call it before reading anything.
Status check_size(std::string_view what, std::size_t n, std::size_t want);
// Writes `magic` (kMagicBytes) and kChunkStreamVersion.
void write(ByteWriter& w, std::string_view magic);
// Reads the opening; false when its magic is not `magic` or its version not kChunkStreamVersion
// (or the bytes ran out: r.ok() then says so).
bool read(ByteReader& r, std::string_view magic);
// Whether the kMagicBytes at p are `magic` (how a holder tells what a connection opens with).
bool starts_with(const std::uint8_t* p, std::string_view magic);

}  // namespace stream_header
}  // namespace sluice::core
