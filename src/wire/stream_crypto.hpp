// Encryption and authentication of chunk streams (wire/chunk_stream.hpp): the handshake that
// agrees a connection's keys from the job's CURVE identities, and the AEAD records that carry
// every byte after it. Pure functions and values, shared by both ends and by the fuzz target
// (tests/fuzz/fuzz_stream_crypto.cpp).
//
// Handshake, little-endian, at the start of an encrypted connection:
//   hello  (104 bytes, reader -> holder): "SLCH", u16 version, u16 suites the reader can run
//          (bit 0 AES-256-GCM, bit 1 ChaCha20-Poly1305 IETF), the reader's static X25519 public
//          key (its CURVE public key, 32), a fresh ephemeral public key (32), 32 random bytes
//   accept (108 bytes, holder -> reader): "SLCA", u16 version, u16 status (0 accepted, 1 the
//          reader is not a member allowed to read, 2 the holder serves clear streams only, 3 no
//          common cipher), u16 the chosen suite, u16 0, the holder's static public key, its
//          ephemeral public key, 32 random bytes (all zero on a refusal, and the holder closes)
// Keys: BLAKE2b-512 over a label, X25519(static, static), X25519(ephemeral, ephemeral) and both
// messages as sent; the first 32 bytes key reader -> holder, the last 32 holder -> reader. The
// static-static secret makes a stranger (a key not in the members file, or a key without its
// secret half) unable to derive them; the ephemeral-ephemeral secret and the fresh randoms make
// every connection's keys new (a replayed hello or record fails) and forward secret.
//
// Records, after the handshake, each direction: u32 plaintext length n (1 .. kMaxRecordBytes),
// then n bytes of ciphertext and a 16-byte tag. The nonce is the record's number in its direction
// (u64 from 0, little-endian, in 12 bytes); the length is authenticated as associated data. The
// plaintext of the records is exactly the clear protocol's byte stream.
//
// Thread safety: values; a RecordCipher belongs to one connection (one thread).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.hpp"
#include "wire/security.hpp"
#include "wire/stream_header.hpp"

namespace sluice::core {

inline constexpr std::size_t kStreamKeyBytes = 32;
using StreamKey = std::array<std::uint8_t, kStreamKeyBytes>;

// A process's identity on chunk streams: its CURVE key pair (an X25519 key pair) and the job's
// members, who may read from it and whom it may read from.
struct StreamKeys {
  StreamKey public_key{};
  StreamKey secret_key{};
  std::shared_ptr<const Members> members;
  std::string identity;  // for messages

  // From a curve-mode Security; failed_precondition in plain mode (nobody has keys).
  static Result<std::shared_ptr<const StreamKeys>> from_security(const Security& s);
  // The member with this public key when its role may read weights (actor, relay, rollout,
  // operator), else null.
  const Member* reader(const StreamKey& key) const;
  // The member with this public key when its role may serve weights (the same roles), else null.
  const Member* holder(const StreamKey& key) const;
};

// What a chunk server accepts: clear connections only, encrypted only, or either (the reader
// chooses; see TransferOptions::stream_encryption).
enum class StreamCrypto : std::uint8_t { kClear = 0, kEither = 1, kEncrypted = 2 };

namespace stream_crypto {

inline constexpr std::uint16_t kVersion = kChunkStreamVersion;
inline constexpr std::size_t kRandomBytes = 32;
inline constexpr std::size_t kHelloBytes = 4 + 2 + 2 + 3 * 32;
inline constexpr std::size_t kAcceptBytes = 4 + 2 + 2 + 2 + 2 + 3 * 32;
inline constexpr std::size_t kTagBytes = 16;
inline constexpr std::size_t kRecordHeaderBytes = 4;
// Plaintext per record, at most: 256 KiB keeps a holder's per-connection buffer small (it may
// have max_connections of them) while the per-record cost (a syscall, a tag) stays negligible.
inline constexpr std::size_t kMaxRecordBytes = 256u << 10;
inline constexpr std::size_t kRecordOverhead = kRecordHeaderBytes + kTagBytes;

inline constexpr std::uint16_t kSuiteAes256Gcm = 1;
inline constexpr std::uint16_t kSuiteChacha20Poly1305 = 2;

inline constexpr std::uint16_t kAccepted = 0;
inline constexpr std::uint16_t kNotMember = 1;
inline constexpr std::uint16_t kClearOnly = 2;
inline constexpr std::uint16_t kNoCommonSuite = 3;

struct Hello {
  std::uint16_t suites = 0;
  StreamKey static_key{};
  StreamKey ephemeral_key{};
  std::array<std::uint8_t, kRandomBytes> random{};
};
struct Accept {
  std::uint16_t status = kAccepted;
  std::uint16_t suite = 0;
  StreamKey static_key{};
  StreamKey ephemeral_key{};
  std::array<std::uint8_t, kRandomBytes> random{};
};

void encode_hello(const Hello& h, std::uint8_t* out);  // kHelloBytes
// Exactly kHelloBytes; protocol_error on a bad magic or version, or no suite offered.
Result<Hello> decode_hello(const std::uint8_t* p, std::size_t n);
void encode_accept(const Accept& a, std::uint8_t* out);  // kAcceptBytes
// Exactly kAcceptBytes; protocol_error on a bad magic, version, reserved field, unknown status,
// or an accept whose suite is not exactly one known suite.
Result<Accept> decode_accept(const std::uint8_t* p, std::size_t n);

// The suites this machine runs (AES-256-GCM only where the CPU has it, libsodium's rule), and the
// one a holder picks from a reader's offer (AES-256-GCM first; 0 when none is common).
std::uint16_t local_suites();
std::uint16_t choose_suite(std::uint16_t offered);
std::string suite_name(std::uint16_t suite);

// A fresh X25519 key pair and random bytes (libsodium's generator).
struct Ephemeral {
  StreamKey public_key{};
  StreamKey secret_key{};
};
Result<Ephemeral> make_ephemeral();
Status fill_random(std::uint8_t* p, std::size_t n);

struct SessionKeys {
  StreamKey reader_to_holder{};
  StreamKey holder_to_reader{};
};
// Either end: `hello` and `accept` are the two messages as sent (kHelloBytes, kAcceptBytes).
// permission_denied when a public key is a low-order point (the shared secret would be known).
Result<SessionKeys> derive_keys(const std::uint8_t* hello, const std::uint8_t* accept,
                                const StreamKey& my_static_secret,
                                const StreamKey& peer_static_public,
                                const StreamKey& my_ephemeral_secret,
                                const StreamKey& peer_ephemeral_public);

// The plaintext length a record header announces; protocol_error when it is 0 or over `max`.
Result<std::size_t> decode_record_header(const std::uint8_t* p, std::size_t max);

// One direction of an encrypted connection: seals or opens its records in order.
class RecordCipher {
 public:
  // `suite` must be one of local_suites().
  RecordCipher(std::uint16_t suite, const StreamKey& key);
  ~RecordCipher();
  RecordCipher(const RecordCipher&) = delete;
  RecordCipher& operator=(const RecordCipher&) = delete;

  // Writes the record of plaintext [p, p + n) (1 <= n <= kMaxRecordBytes) to out: n +
  // kRecordOverhead bytes. p may equal out + kRecordHeaderBytes (sealed in place).
  void seal(const std::uint8_t* p, std::size_t n, std::uint8_t* out);
  // Opens the record whose header announced n bytes: `body` holds its n bytes of ciphertext and
  // `tag` its kTagBytes; the plaintext goes to dst (which may equal body). data_loss when the tag
  // does not verify (the connection must then be closed: dst may hold garbage).
  Status open(const std::uint8_t* body, std::size_t n, const std::uint8_t* tag, std::uint8_t* dst);
  std::uint64_t records() const { return counter_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::uint16_t suite_;
  std::uint64_t counter_ = 0;
};

}  // namespace stream_crypto
}  // namespace sluice::core
