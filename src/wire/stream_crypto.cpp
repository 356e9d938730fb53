#include "wire/stream_crypto.hpp"

#include <sodium.h>
#include <zmq.h>

#include <cstring>

#include "core/bytes.hpp"

namespace sluice::core {

namespace {

// Binds the derived keys to this protocol and its version.
constexpr char kKeyLabel[] = "sluice chunk stream v2 keys";
constexpr std::size_t kAeadNonceBytes = 12;  // both suites (the IETF ChaCha20-Poly1305)

static_assert(crypto_aead_aes256gcm_NPUBBYTES == kAeadNonceBytes);
static_assert(crypto_aead_chacha20poly1305_ietf_NPUBBYTES == kAeadNonceBytes);
static_assert(crypto_aead_aes256gcm_ABYTES == stream_crypto::kTagBytes);
static_assert(crypto_aead_chacha20poly1305_ietf_ABYTES == stream_crypto::kTagBytes);
static_assert(crypto_scalarmult_BYTES == kStreamKeyBytes);

bool sodium_ready() {
  static const int rc = sodium_init();  // idempotent and thread-safe; -1 on failure
  return rc >= 0;
}

bool z85_key(const std::string& z85, StreamKey& out) {
  return z85.size() == 40 && zmq_z85_decode(out.data(), z85.c_str()) != nullptr;
}

std::string z85_text(const StreamKey& key) {
  char text[41];
  if (!zmq_z85_encode(text, key.data(), key.size())) return {};
  return text;
}

bool may_move_weights(const std::string& role) {
  return role == kRoleActor || role == kRoleRelay || role == kRoleRollout || role == kRoleOperator;
}

}  // namespace

Result<std::shared_ptr<const StreamKeys>> StreamKeys::from_security(const Security& s) {
  if (!s.curve() || !s.members)
    return failed_precondition(
        "chunk stream encryption needs the job's keys (auth curve); this process runs plain");
  if (!sodium_ready()) return internal_error("libsodium failed to initialise");
  auto k = std::make_shared<StreamKeys>();
  if (!z85_key(s.keys.public_key, k->public_key) || !z85_key(s.keys.secret_key, k->secret_key))
    return invalid_argument("chunk stream keys: the key pair is not two Z85 keys");
  StreamKey derived{};
  if (crypto_scalarmult_base(derived.data(), k->secret_key.data()) != 0 ||
      sodium_memcmp(derived.data(), k->public_key.data(), kStreamKeyBytes) != 0)
    return invalid_argument("chunk stream keys: the secret key does not derive the public key");
  k->members = s.members;
  k->identity = s.identity;
  return std::shared_ptr<const StreamKeys>(std::move(k));
}

const Member* StreamKeys::reader(const StreamKey& key) const {
  const Member* m = members ? members->by_key(z85_text(key)) : nullptr;
  return m && may_move_weights(m->role) ? m : nullptr;
}

const Member* StreamKeys::holder(const StreamKey& key) const {
  return reader(key);  // the same roles read and serve (relays and rollouts do both)
}

namespace stream_crypto {

void encode_hello(const Hello& h, std::uint8_t* out) {
  ByteWriter w(out, kHelloBytes);
  stream_header::write(w, stream_header::kHelloMagic);
  w.u16(h.suites);
  w.put(h.static_key.data(), kStreamKeyBytes);
  w.put(h.ephemeral_key.data(), kStreamKeyBytes);
  w.put(h.random.data(), kRandomBytes);
}

Result<Hello> decode_hello(const std::uint8_t* p, std::size_t n) {
  SLUICE_TRY(stream_header::check_size("hello", n, kHelloBytes));
  ByteReader r(p, n);  // the size is checked: every read below fits
  if (!stream_header::read(r, stream_header::kHelloMagic))
    return protocol_error("chunk stream hello with a bad magic or version");
  Hello h;
  h.suites = r.u16();
  if ((h.suites & (kSuiteAes256Gcm | kSuiteChacha20Poly1305)) == 0)
    return protocol_error("chunk stream hello offers no cipher this build knows");
  r.copy(h.static_key.data(), kStreamKeyBytes);
  r.copy(h.ephemeral_key.data(), kStreamKeyBytes);
  r.copy(h.random.data(), kRandomBytes);
  return h;
}

void encode_accept(const Accept& a, std::uint8_t* out) {
  ByteWriter w(out, kAcceptBytes);
  stream_header::write(w, stream_header::kAcceptMagic);
  w.u16(a.status).u16(a.suite).u16(0);
  w.put(a.static_key.data(), kStreamKeyBytes);
  w.put(a.ephemeral_key.data(), kStreamKeyBytes);
  w.put(a.random.data(), kRandomBytes);
}

Result<Accept> decode_accept(const std::uint8_t* p, std::size_t n) {
  SLUICE_TRY(stream_header::check_size("accept", n, kAcceptBytes));
  ByteReader r(p, n);  // the size is checked: every read below fits
  const bool opening = stream_header::read(r, stream_header::kAcceptMagic);
  Accept a;
  a.status = r.u16();
  a.suite = r.u16();
  const std::uint16_t reserved = r.u16();
  if (!opening || reserved != 0)
    return protocol_error("chunk stream accept with a bad magic, version or reserved field");
  if (a.status > kNoCommonSuite)
    return protocol_error("chunk stream accept of unknown status " + std::to_string(a.status));
  if (a.status == kAccepted && a.suite != kSuiteAes256Gcm && a.suite != kSuiteChacha20Poly1305)
    return protocol_error("chunk stream accept with cipher " + std::to_string(a.suite));
  r.copy(a.static_key.data(), kStreamKeyBytes);
  r.copy(a.ephemeral_key.data(), kStreamKeyBytes);
  r.copy(a.random.data(), kRandomBytes);
  return a;
}

std::uint16_t local_suites() {
  if (!sodium_ready()) return 0;
  std::uint16_t s = kSuiteChacha20Poly1305;
  if (crypto_aead_aes256gcm_is_available()) s |= kSuiteAes256Gcm;
  return s;
}

std::uint16_t choose_suite(std::uint16_t offered) {
  const std::uint16_t common = static_cast<std::uint16_t>(offered & local_suites());
  // AES-256-GCM where both CPUs have it: measured faster than ChaCha20-Poly1305 with AES-NI.
  if (common & kSuiteAes256Gcm) return kSuiteAes256Gcm;
  if (common & kSuiteChacha20Poly1305) return kSuiteChacha20Poly1305;
  return 0;
}

std::string suite_name(std::uint16_t suite) {
  if (suite == kSuiteAes256Gcm) return "aes-256-gcm";
  if (suite == kSuiteChacha20Poly1305) return "chacha20-poly1305";
  return "none";
}

Status fill_random(std::uint8_t* p, std::size_t n) {
  if (!sodium_ready()) return internal_error("libsodium failed to initialise");
  randombytes_buf(p, n);
  return {};
}

Result<Ephemeral> make_ephemeral() {
  Ephemeral e;
  SLUICE_TRY(fill_random(e.secret_key.data(), e.secret_key.size()));
  if (crypto_scalarmult_base(e.public_key.data(), e.secret_key.data()) != 0)
    return internal_error("chunk stream: no ephemeral key");
  return e;
}

Result<SessionKeys> derive_keys(const std::uint8_t* hello, const std::uint8_t* accept,
                                const StreamKey& my_static_secret,
                                const StreamKey& peer_static_public,
                                const StreamKey& my_ephemeral_secret,
                                const StreamKey& peer_ephemeral_public) {
  if (!sodium_ready()) return internal_error("libsodium failed to initialise");
  std::uint8_t ss[kStreamKeyBytes], ee[kStreamKeyBytes];
  // crypto_scalarmult fails for a low-order point, whose product anyone could know.
  if (crypto_scalarmult(ss, my_static_secret.data(), peer_static_public.data()) != 0 ||
      crypto_scalarmult(ee, my_ephemeral_secret.data(), peer_ephemeral_public.data()) != 0) {
    sodium_memzero(ss, sizeof ss);
    return permission_denied("chunk stream handshake: a public key is a low-order point");
  }
  crypto_generichash_state h;
  std::uint8_t out[2 * kStreamKeyBytes];
  crypto_generichash_init(&h, nullptr, 0, sizeof out);
  crypto_generichash_update(&h, reinterpret_cast<const unsigned char*>(kKeyLabel),
                            sizeof kKeyLabel);
  crypto_generichash_update(&h, ss, sizeof ss);
  crypto_generichash_update(&h, ee, sizeof ee);
  crypto_generichash_update(&h, hello, kHelloBytes);
  crypto_generichash_update(&h, accept, kAcceptBytes);
  crypto_generichash_final(&h, out, sizeof out);
  SessionKeys k;
  std::memcpy(k.reader_to_holder.data(), out, kStreamKeyBytes);
  std::memcpy(k.holder_to_reader.data(), out + kStreamKeyBytes, kStreamKeyBytes);
  sodium_memzero(ss, sizeof ss);
  sodium_memzero(ee, sizeof ee);
  sodium_memzero(out, sizeof out);
  return k;
}

Result<std::size_t> decode_record_header(const std::uint8_t* p, std::size_t max) {
  ByteReader r(p, kRecordHeaderBytes);
  const std::uint64_t n = r.u32();
  if (n == 0 || n > max)
    return protocol_error("chunk stream record of " + std::to_string(n) + " bytes (1 to " +
                          std::to_string(max) + ")");
  return static_cast<std::size_t>(n);
}

struct RecordCipher::State {
  crypto_aead_aes256gcm_state aes;  // AES-256-GCM: the key schedule, expanded once
  StreamKey key{};                  // ChaCha20-Poly1305
};

RecordCipher::RecordCipher(std::uint16_t suite, const StreamKey& key)
    : state_(std::make_unique<State>()), suite_(suite) {
  if (suite_ == kSuiteAes256Gcm)
    crypto_aead_aes256gcm_beforenm(&state_->aes, key.data());
  else
    state_->key = key;
}

RecordCipher::~RecordCipher() {
  sodium_memzero(state_.get(), sizeof(State));
}

void RecordCipher::seal(const std::uint8_t* p, std::size_t n, std::uint8_t* out) {
  std::uint8_t nonce[kAeadNonceBytes] = {};
  ByteWriter(nonce, sizeof nonce).u64(counter_++);
  ByteWriter(out, kRecordHeaderBytes).u32(static_cast<std::uint32_t>(n));
  std::uint8_t* c = out + kRecordHeaderBytes;
  std::uint8_t* tag = c + n;
  if (suite_ == kSuiteAes256Gcm)
    crypto_aead_aes256gcm_encrypt_detached_afternm(c, tag, nullptr, p, n, out, kRecordHeaderBytes,
                                                   nullptr, nonce, &state_->aes);
  else
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(
        c, tag, nullptr, p, n, out, kRecordHeaderBytes, nullptr, nonce, state_->key.data());
}

Status RecordCipher::open(const std::uint8_t* body, std::size_t n, const std::uint8_t* tag,
                          std::uint8_t* dst) {
  std::uint8_t nonce[kAeadNonceBytes] = {};
  ByteWriter(nonce, sizeof nonce).u64(counter_++);
  std::uint8_t header[kRecordHeaderBytes];
  ByteWriter(header, sizeof header).u32(static_cast<std::uint32_t>(n));
  const int rc =
      suite_ == kSuiteAes256Gcm
          ? crypto_aead_aes256gcm_decrypt_detached_afternm(dst, nullptr, body, n, tag, header,
                                                           sizeof header, nonce, &state_->aes)
          : crypto_aead_chacha20poly1305_ietf_decrypt_detached(
                dst, nullptr, body, n, tag, header, sizeof header, nonce, state_->key.data());
  if (rc != 0)
    return data_loss("chunk stream record " + std::to_string(counter_ - 1) +
                     " failed its authentication tag");
  return {};
}

}  // namespace stream_crypto
}  // namespace sluice::core
