// Chunk streams: a holder serves reads of its memory over TCP on its own event loop;
// bytes arrive equal, a bad request is refused, and a reader that goes away mid-read, or memory
// withdrawn under a reply, leaves the holder serving everyone else.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "../support/await_gets.hpp"
#include "core/units.hpp"
#include "wire/chunk_stream.hpp"

using namespace sluice;
using namespace sluice::core;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  fill_pseudo_random(v.data(), v.size(), seed);
  return v;
}

struct Fixture {
  std::unique_ptr<EventLoop> loop = EventLoop::create().value();
  std::unique_ptr<ChunkServer> server = ChunkServer::create(*loop, "127.0.0.1").value();

  std::unique_ptr<ChunkStream> connect(const std::string& token) {
    return ChunkStream::connect(*loop, server->addresses(), token, Millis(2000)).value();
  }
  // Runs gets to completion; returns each one's status.
  std::vector<Status> run(std::vector<std::optional<Status>>& out) {
    return testing::await_gets(*loop, out);
  }
};

}  // namespace

TEST_SUITE("core.chunk_stream") {
  TEST_CASE(
      "the wire format: requests and replies round-trip, ranges are judged without overflow") {
    namespace w = chunk_wire;
    std::uint8_t buf[w::kRequestBytes];
    w::encode_request({std::string(kStreamTokenBytes, 'k'), 4096, 512, 77}, buf);
    auto r = w::decode_request(buf, sizeof buf);
    REQUIRE(r.is_ok());
    CHECK(r->token == std::string(kStreamTokenBytes, 'k'));
    CHECK(r->offset == 4096);
    CHECK(r->length == 512);
    CHECK(r->id == 77);
    CHECK(w::decode_request(buf, sizeof buf - 1).status().code() == Code::kProtocol);
    buf[0] = 'X';
    CHECK(w::decode_request(buf, sizeof buf).status().code() == Code::kProtocol);

    std::uint8_t h[w::kReplyBytes];
    w::encode_reply_header({w::kOk, 5, 512}, h);
    auto ok = w::decode_reply_header(h, sizeof h);
    REQUIRE(ok.is_ok());
    CHECK(ok->length == 512);
    w::encode_reply_header({w::kOutOfRange, 5, 9}, h);  // a refusal that claims a payload
    CHECK(w::decode_reply_header(h, sizeof h).status().code() == Code::kProtocol);
    w::encode_reply_header({7, 5, 0}, h);  // a status no version knows
    CHECK(w::decode_reply_header(h, sizeof h).status().code() == Code::kProtocol);

    const std::uint64_t max = ~std::uint64_t{0};
    CHECK(w::range_inside(100, 0, 100));
    CHECK(w::range_inside(100, 99, 1));
    CHECK_FALSE(w::range_inside(100, 99, 2));
    CHECK_FALSE(w::range_inside(100, 100, 1));
    CHECK_FALSE(w::range_inside(100, 0, 0));
    CHECK_FALSE(w::range_inside(100, max, 2));  // offset + length wraps to 1
    CHECK_FALSE(w::range_inside(max, 2, max));
    CHECK(w::range_inside(max, 1, max - 1));
  }

  TEST_CASE("pipelined reads arrive byte for byte, in any order of offsets") {
    Fixture f;
    auto mem = pattern(8u << 20, 7);
    auto token = f.server->expose(mem.data(), mem.size()).value();
    auto s = f.connect(token);
    std::vector<std::uint8_t> dst(mem.size(), 0);
    const std::uint64_t chunk = 1u << 20;
    std::vector<std::optional<Status>> out(8);
    for (int i = 7; i >= 0; --i) {  // backwards: offsets are the reader's choice
      s->get(i * chunk, chunk, dst.data() + i * chunk,
             [&out, i](Status st) { out[static_cast<std::size_t>(i)] = st; });
    }
    for (const auto& st : f.run(out))
      CHECK_MESSAGE(st.is_ok(), st.to_string());
    CHECK(std::memcmp(dst.data(), mem.data(), mem.size()) == 0);
    CHECK(f.server->stats().requests == 8);
    CHECK(f.server->stats().refused == 0);
  }

  TEST_CASE("an unknown token, a range outside the region and one that wraps are refused") {
    Fixture f;
    auto mem = pattern(1u << 20, 8);
    auto token = f.server->expose(mem.data(), mem.size()).value();
    std::string stranger(kStreamTokenBytes, 'x');
    std::vector<std::uint8_t> dst(4096);
    std::vector<std::optional<Status>> out(4);
    auto unknown = f.connect(stranger);
    unknown->get(0, 4096, dst.data(), [&](Status st) { out[0] = st; });
    auto s = f.connect(token);
    s->get(mem.size() - 10, 4096, dst.data(), [&](Status st) { out[1] = st; });
    s->get(UINT64_MAX - 100, 4096, dst.data(), [&](Status st) { out[2] = st; });
    s->get(0, 4096, dst.data(), [&](Status st) { out[3] = st; });  // the stream goes on
    auto st = f.run(out);
    CHECK(st[0].code() == Code::kNotFound);
    CHECK(st[1].code() == Code::kInvalidArgument);
    CHECK(st[2].code() == Code::kInvalidArgument);
    CHECK(st[3].is_ok());
    CHECK(std::memcmp(dst.data(), mem.data(), 4096) == 0);
    CHECK(f.server->stats().refused == 3);
  }

  TEST_CASE("a reader that vanishes mid-read leaves the holder serving the next one") {
    Fixture f;
    auto mem = pattern(32u << 20, 9);
    auto token = f.server->expose(mem.data(), mem.size()).value();
    std::vector<std::uint8_t> dst(mem.size(), 0);
    {
      // Ask for everything and go away while the replies are being written.
      auto s = f.connect(token);
      int done = 0;
      for (int i = 0; i < 32; ++i)
        s->get(i * (1u << 20), 1u << 20, dst.data() + i * (1u << 20), [&](Status) { ++done; });
      f.loop->run_until([&] { return done >= 2; }, Millis(10000));
    }  // destroyed: the connection closes with replies still queued at the holder
    // Garbage from a stranger's socket: the holder closes that connection only.
    int raw = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(
        std::stoi(f.server->addresses()[0].substr(f.server->addresses()[0].rfind(':') + 1))));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(::connect(raw, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    std::string junk(48, 'j');
    REQUIRE(::send(raw, junk.data(), junk.size(), MSG_NOSIGNAL) == 48);
    f.loop->run_until([&] { return f.server->stats().refused >= 1; }, Millis(5000));
    CHECK(f.server->stats().refused == 1);
    ::close(raw);

    std::fill(dst.begin(), dst.end(), 0);
    auto s = f.connect(token);
    std::vector<std::optional<Status>> out(32);
    for (std::size_t i = 0; i < 32; ++i)
      s->get(i * (1u << 20), 1u << 20, dst.data() + i * (1u << 20),
             [&out, i](Status st) { out[i] = st; });
    for (const auto& st : f.run(out))
      CHECK_MESSAGE(st.is_ok(), st.to_string());
    CHECK(std::memcmp(dst.data(), mem.data(), mem.size()) == 0);
  }

  TEST_CASE(
      "memory withdrawn under a reply closes that reader's stream, and nothing reads it after") {
    Fixture f;
    auto mem = std::make_unique<std::vector<std::uint8_t>>(pattern(64u << 20, 10));
    auto token = f.server->expose(mem->data(), mem->size()).value();
    std::vector<std::uint8_t> dst(mem->size(), 0);
    auto s = f.connect(token);
    std::vector<std::optional<Status>> out(64);
    for (std::size_t i = 0; i < 64; ++i)
      s->get(i * (1u << 20), 1u << 20, dst.data() + i * (1u << 20),
             [&out, i](Status st) { out[i] = st; });
    f.loop->run_until([&] { return out[0].has_value(); }, Millis(10000));
    f.server->withdraw(token);
    mem.reset();  // under ASan, a later read of it by the holder would be caught
    auto st = f.run(out);
    std::size_t ok = 0, failed = 0;
    for (const auto& x : st) {
      if (x.is_ok()) ++ok;
      if (x.code() == Code::kUnavailable || x.code() == Code::kNotFound) ++failed;
    }
    CHECK(ok + failed == 64);
    CHECK(failed > 0);
    // A new read of the withdrawn token is refused, not served.
    auto again = f.connect(token);
    std::vector<std::optional<Status>> one(1);
    again->get(0, 4096, dst.data(), [&](Status x) { one[0] = x; });
    CHECK(f.run(one)[0].code() == Code::kNotFound);
  }

  TEST_CASE("nothing listening: the read fails with a clear error within its connect timeout") {
    auto loop = EventLoop::create().value();
    int probe = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    ::close(probe);  // a port nobody listens on
    std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    auto s =
        ChunkStream::connect(*loop, {"not-an-address", addr}, std::string(16, 't'), Millis(2000))
            .value();
    std::vector<std::uint8_t> dst(16);
    std::optional<Status> st;
    s->get(0, 16, dst.data(), [&](Status x) { st = x; });
    loop->run_until([&] { return st.has_value(); }, Millis(5000));
    REQUIRE(st.has_value());
    CHECK(st->code() == Code::kUnavailable);
    CHECK(st->message().find("cannot connect") != std::string::npos);
  }
}
