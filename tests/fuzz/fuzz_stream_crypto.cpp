// libFuzzer target: the encrypted chunk stream's handshake and records (wire/stream_crypto.hpp),
// as a holder decodes a reader's hello and a reader decodes a holder's accept and its records.
// The first bytes are read as a hello, the next as an accept (each that decodes must encode back
// to the same bytes), and the rest as a run of records under a fixed key: each record header is
// judged, and each record opened, which must fail (nobody without the key makes a valid tag).
// Then the rest is sealed and opened again: it must come back equal, and with one bit flipped
// (where the input's first byte says) it must not open.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "wire/stream_crypto.hpp"

namespace sc = sluice::core::stream_crypto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 0;
  const std::size_t hello_n = size < sc::kHelloBytes ? size : sc::kHelloBytes;
  if (auto h = sc::decode_hello(data, hello_n); h.is_ok()) {
    std::uint8_t again[sc::kHelloBytes];
    sc::encode_hello(*h, again);
    if (hello_n != sc::kHelloBytes || std::memcmp(again, data, sc::kHelloBytes) != 0) std::abort();
  }
  at += hello_n;
  const std::size_t accept_n = size - at < sc::kAcceptBytes ? size - at : sc::kAcceptBytes;
  if (auto a = sc::decode_accept(data + at, accept_n); a.is_ok()) {
    std::uint8_t again[sc::kAcceptBytes];
    sc::encode_accept(*a, again);
    if (accept_n != sc::kAcceptBytes || std::memcmp(again, data + at, sc::kAcceptBytes) != 0)
      std::abort();
    if (a->status == sc::kAccepted && sc::choose_suite(a->suite) != a->suite &&
        (sc::local_suites() & a->suite))
      std::abort();
  }
  at += accept_n;
  const std::uint8_t* rest = data + at;
  const std::size_t rest_n = size - at;

  sluice::core::StreamKey key{};
  key.fill(7);
  const std::uint16_t suite = sc::choose_suite(sc::local_suites());
  {
    sc::RecordCipher in(suite, key);
    std::size_t p = 0;
    std::vector<std::uint8_t> plain;
    while (rest_n - p >= sc::kRecordHeaderBytes) {
      auto n = sc::decode_record_header(rest + p, 1u << 16);
      if (!n.is_ok()) break;
      if (*n == 0 || *n > (1u << 16)) std::abort();
      p += sc::kRecordHeaderBytes;
      if (rest_n - p < *n + sc::kTagBytes) break;
      plain.resize(*n);
      if (in.open(rest + p, *n, rest + p + *n, plain.data()).is_ok()) std::abort();
      p += *n + sc::kTagBytes;
    }
  }
  if (rest_n == 0 || rest_n > sc::kMaxRecordBytes) return 0;
  sc::RecordCipher seal(suite, key), open(suite, key), open_flipped(suite, key);
  std::vector<std::uint8_t> record(rest_n + sc::kRecordOverhead);
  seal.seal(rest, rest_n, record.data());
  std::vector<std::uint8_t> back(rest_n);
  std::uint8_t* body = record.data() + sc::kRecordHeaderBytes;
  if (!open.open(body, rest_n, body + rest_n, back.data()).is_ok()) std::abort();
  if (std::memcmp(back.data(), rest, rest_n) != 0) std::abort();
  const std::size_t flip = data[0] % (rest_n + sc::kTagBytes);
  body[flip] ^= 0x80;
  if (open_flipped.open(body, rest_n, body + rest_n, back.data()).is_ok()) std::abort();
  return 0;
}
