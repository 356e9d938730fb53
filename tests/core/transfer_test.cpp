// Multi-process reads over real UCX (tcp and shared memory) between `sluice transfer-source`
// processes and a reader in this process.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <thread>

#include "../support/job_keys.hpp"
#include "../support/transfer_source.hpp"
#include "core/checksum.hpp"
#include "core/cuda_device.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "wire/chunk_stream.hpp"
#include "wire/messaging.hpp"
#include "wire/region_server.hpp"
#include "wire/transfer.hpp"
#include "wire/ucx.hpp"

using namespace sluice::core;
using sluice::testing::JobKeys;

namespace {

// A `sluice transfer-source` process serving `bytes` of seeded data in chunks of `chunk`, and the
// reader side: a loop, an engine on the given transport, and control clients.
using Source = sluice::testing::TransferSource;
using Reader = sluice::testing::SourceReader;
using sluice::testing::tls_env;

std::vector<std::uint8_t> expected(std::uint64_t bytes, std::uint64_t seed) {
  std::vector<std::uint8_t> v(bytes);
  fill_pseudo_random(v.data(), v.size(), seed);
  return v;
}

bool equal_bytes(const RegisteredBuffer& buf, const std::vector<std::uint8_t>& want) {
  return buf.size() >= want.size() && std::memcmp(buf.data(), want.data(), want.size()) == 0;
}

}  // namespace

TEST_SUITE("core.transfer") {
  TEST_CASE("retired buffers stay registered and readable until their grace has passed") {
    Reader rd("sm,self");
    RetiredBuffers lasting(std::chrono::hours(1));
    RetiredBuffers brief(std::chrono::milliseconds(0));
    auto a = rd.engine->allocate(1 << 16).value();
    auto b = rd.engine->allocate(1 << 16).value();
    std::memset(a->data(), 0x5a, a->size());
    const std::uint8_t* a_bytes = a->data();
    lasting.add(std::move(a));
    brief.add(std::move(b));
    lasting.add(nullptr);  // ignored
    lasting.sweep();
    brief.sweep();
    CHECK(lasting.size() == 1);
    CHECK(brief.empty());
    // Still owned, so still mapped: reading it is no use after free (ASAN would say so).
    CHECK(a_bytes[0] == 0x5a);
    CHECK(a_bytes[(1 << 16) - 1] == 0x5a);
  }

  TEST_CASE("copying with a checksum gives memcpy's bytes and chunk_checksum's value") {
    // Sizes around the streaming threshold and block, at offsets that misalign the destination.
    std::vector<std::uint8_t> src((3u << 20) + 512), dst(src.size() + 64);
    fill_pseudo_random(src.data(), src.size(), 99);
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{65537},
                              std::size_t{256u << 10}, std::size_t{(1u << 20) + 17}, src.size()}) {
      for (std::size_t shift : {0, 1, 8, 33}) {
        CAPTURE(bytes);
        CAPTURE(shift);
        std::fill(dst.begin(), dst.end(), 0xEE);
        std::uint64_t got = copy_with_checksum(dst.data() + shift, src.data(), bytes);
        CHECK(got == chunk_checksum(src.data(), bytes));
        CHECK(std::memcmp(dst.data() + shift, src.data(), bytes) == 0);
        // Nothing around the destination range is written.
        bool untouched = true;
        for (std::size_t i = 0; i < shift; ++i)
          untouched = untouched && dst[i] == 0xEE;
        for (std::size_t i = shift + bytes; i < dst.size(); ++i)
          untouched = untouched && dst[i] == 0xEE;
        CHECK(untouched);
      }
    }
  }

  TEST_CASE("a source rewritten during a checksummed copy cannot give a copy that verifies") {
    // The publisher may rewrite a buffer while a same-host reader copies it. Whatever mix of old
    // and new bytes lands in the destination, the returned checksum must be that of the
    // destination, so a torn chunk fails verification instead of passing as the old one.
    static std::uint8_t* racing_src = nullptr;
    static std::size_t racing_bytes = 0;
    std::vector<std::uint8_t> src(1u << 20), dst(src.size());
    fill_pseudo_random(src.data(), src.size(), 7);
    const std::uint64_t before = chunk_checksum(src.data(), src.size());
    for (std::size_t bytes : {std::size_t{100000}, src.size()}) {
      CAPTURE(bytes);
      racing_src = src.data();
      racing_bytes = bytes;
      // A writer racing the copy: right after each read of the source, rewrite all of it.
      detail::copy_with_checksum_read_hook = [](std::size_t) {
        for (std::size_t i = 0; i < racing_bytes; ++i)
          racing_src[i] = static_cast<std::uint8_t>(racing_src[i] + 1);
      };
      std::uint64_t got = copy_with_checksum(dst.data(), src.data(), bytes);
      detail::copy_with_checksum_read_hook = nullptr;
      CHECK(got == chunk_checksum(dst.data(), bytes));
      fill_pseudo_random(src.data(), src.size(), 7);
    }
    CHECK(chunk_checksum(src.data(), src.size()) == before);
  }

  TEST_CASE("a descriptor round-trips, and a truncated or foreign one is rejected") {
    RegionDescriptor d;
    d.worker_address = std::string("\x01\x02\x03worker", 9);
    d.base = 0x7f0012345000ull;
    d.length = 1ull << 30;
    d.rkey = std::string("\x00rkey-bytes", 11);
    d.host = "boot/ipc";
    d.stream = {"10.0.0.2:4000", "127.0.0.1:4000"};
    d.stream_token = std::string(kStreamTokenBytes, 't');
    d.stream_crypto = StreamCrypto::kEither;
    d.datacenter = "dc-west";
    d.uid = 1234;
    d.verified = true;
    std::string enc = d.encode();
    auto back = RegionDescriptor::decode(enc);
    REQUIRE(back.is_ok());
    CHECK(back->worker_address == d.worker_address);
    CHECK(back->base == d.base);
    CHECK(back->length == d.length);
    CHECK(back->rkey == d.rkey);
    CHECK(back->host == d.host);
    CHECK(back->stream == d.stream);
    CHECK(back->stream_token == d.stream_token);
    CHECK(back->stream_crypto == StreamCrypto::kEither);
    CHECK(back->datacenter == "dc-west");
    CHECK(back->uid == 1234);
    CHECK(back->verified);

    // Flags this build does not know are refused, not ignored.
    std::string flags = enc;
    flags.back() = 3;
    auto unknown = RegionDescriptor::decode(flags);
    REQUIRE_FALSE(unknown.is_ok());
    CHECK(unknown.status().code() == Code::kProtocol);
    CHECK(unknown.status().message().find("unknown flags 3") != std::string::npos);

    // A chunk stream needs both its addresses and a whole token.
    RegionDescriptor half = d;
    half.stream_token = "short";
    CHECK(RegionDescriptor::decode(half.encode()).status().code() == Code::kProtocol);
    half.stream.clear();
    half.stream_token.clear();
    CHECK(RegionDescriptor::decode(half.encode()).is_ok());

    for (std::size_t n = 0; n < enc.size(); ++n) {
      auto r = RegionDescriptor::decode(enc.substr(0, n));
      CHECK_MESSAGE(!r.is_ok(), "accepted a descriptor truncated to ", n, " bytes");
      if (!r.is_ok()) CHECK(r.status().code() == Code::kProtocol);
    }
    CHECK_FALSE(RegionDescriptor::decode(enc + "x").is_ok());  // trailing bytes
    // A clear error names the field that is missing.
    CHECK(RegionDescriptor::decode(enc.substr(0, enc.size() - 1))
              .status()
              .message()
              .find("truncated before its flags") != std::string::npos);
    CHECK(RegionDescriptor::decode(enc.substr(0, enc.size() - 3))
              .status()
              .message()
              .find("truncated before its holder uid") != std::string::npos);

    std::string other = enc;
    other[4] = 3;  // format version 3, before the holder's uid and flags
    auto v = RegionDescriptor::decode(other);
    REQUIRE_FALSE(v.is_ok());
    CHECK(v.status().message().find("version 3 is not supported") != std::string::npos);

    std::string magic = enc;
    magic[0] = 'X';
    CHECK(RegionDescriptor::decode(magic).status().message().find("magic") != std::string::npos);
  }

  TEST_CASE("multi-process reads return the source's bytes, over tcp and over shared memory") {
    struct Case {
      std::uint64_t bytes, chunk;
    };
    const Case cases[] = {
        {1, 4096},                     // smaller than a chunk
        {1000, 256},                   // not a multiple of the chunk size
        {(5u << 20) + 123, 1u << 20},  // several chunks and a short last one
        {64u << 20, 8u << 20},         // a multiple
    };
    for (const char* tls : {"tcp", "sm"}) {
      for (const auto& c : cases) {
        CAPTURE(tls);
        CAPTURE(c.bytes);
        CAPTURE(c.chunk);
        std::uint64_t seed = c.bytes * 7 + 3;
        Source src(tls, c.bytes, c.chunk, seed);
        Reader rd(tls);
        auto region = rd.describe(src);
        CHECK(region.layout.bytes == c.bytes);
        CHECK(region.layout.chunk_count() == (c.bytes + c.chunk - 1) / c.chunk);
        auto dst = rd.engine->allocate(c.bytes).value();
        std::uint64_t last_done = 0;
        bool monotonic = true;
        ReadOptions opt;
        opt.progress_interval = Millis(0);
        opt.on_progress = [&](const ReadProgress& p) {
          monotonic = monotonic && p.bytes_done >= last_done && p.bytes_total == c.bytes;
          last_done = p.bytes_done;
        };
        auto st = rd.engine->read_sync({{"src", region.descriptor}},
                                       whole_region_chunks(region.layout), *dst, opt);
        REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
        CHECK(st->bytes == c.bytes);
        CHECK(st->retries == 0);
        CHECK(monotonic);
        CHECK(last_done == c.bytes);
        CHECK(equal_bytes(*dst, expected(c.bytes, seed)));
      }
    }
  }

  TEST_CASE("two sources are striped, and both serve") {
    const std::uint64_t bytes = 32u << 20, chunk = 1u << 20, seed = 11;
    Source a("tcp", bytes, chunk, seed), b("tcp", bytes, chunk, seed);
    Reader rd("tcp");
    auto ra = rd.describe(a), rb = rd.describe(b);
    REQUIRE(ra.layout.checksums == rb.layout.checksums);
    auto dst = rd.engine->allocate(bytes).value();
    ReadOptions opt;
    opt.max_in_flight_per_source = 2;
    auto st = rd.engine->read_sync({{"a", ra.descriptor}, {"b", rb.descriptor}},
                                   whole_region_chunks(ra.layout), *dst, opt);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    REQUIRE(st->bytes_per_source.size() == 2);
    CHECK(st->bytes_per_source[0] + st->bytes_per_source[1] == bytes);
    CHECK(st->bytes_per_source[0] > 0);
    CHECK(st->bytes_per_source[1] > 0);
    CHECK(equal_bytes(*dst, expected(bytes, seed)));
  }

  TEST_CASE("a corrupted chunk is detected by its digest and fetched again from another source") {
    const std::uint64_t bytes = 8u << 20, chunk = 1u << 20, seed = 5;
    for (const char* tls : {"tcp", "sm"}) {
      CAPTURE(tls);
      // Source a serves chunk 0 corrupted (its checksums are of the good bytes). The reader asks
      // source 0 first for the first chunk, so the corrupt copy is the one that arrives first.
      Source bad(tls, bytes, chunk, seed, 0), good(tls, bytes, chunk, seed);
      Reader rd(tls);
      auto rbad = rd.describe(bad), rgood = rd.describe(good);
      auto dst = rd.engine->allocate(bytes).value();
      ReadOptions opt;
      opt.max_in_flight_per_source = 1;
      auto st = rd.engine->read_sync({{"bad", rbad.descriptor}, {"good", rgood.descriptor}},
                                     whole_region_chunks(rbad.layout), *dst, opt);
      REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
      CHECK(st->checksum_failures == 1);
      CHECK(st->retries >= 1);
      CHECK(equal_bytes(*dst, expected(bytes, seed)));

      // With only the corrupt source, the read fails and says why.
      auto dst2 = rd.engine->allocate(bytes).value();
      auto only = rd.engine->read_sync({{"bad", rbad.descriptor}}, whole_region_chunks(rbad.layout),
                                       *dst2, opt);
      REQUIRE_FALSE(only.is_ok());
      CHECK(only.status().code() == Code::kDataLoss);
      // The source describes its region with digests: the reader checks those.
      CHECK(only.status().message().find("bad: digest mismatch") != std::string::npos);
    }
  }

  TEST_CASE("killing one of two sources mid-read still completes the read from the other") {
    const std::uint64_t bytes = 128u << 20, chunk = 1u << 20, seed = 21;
    Source a("tcp", bytes, chunk, seed), b("tcp", bytes, chunk, seed);
    Reader rd("tcp");
    auto ra = rd.describe(a), rb = rd.describe(b);
    auto dst = rd.engine->allocate(bytes).value();
    bool killed = false;
    std::uint64_t done_at_kill = 0;
    ReadOptions opt;
    opt.max_in_flight_per_source = 2;
    opt.op_timeout = Millis(5000);
    opt.progress_interval = Millis(0);
    opt.on_progress = [&](const ReadProgress& p) {
      if (!killed && p.bytes_done >= bytes / 8) {
        REQUIRE(a.proc->signal(SIGKILL).is_ok());
        killed = true;
        done_at_kill = p.bytes_done;
      }
    };
    auto st = rd.engine->read_sync({{"a", ra.descriptor}, {"b", rb.descriptor}},
                                   whole_region_chunks(ra.layout), *dst, opt);
    REQUIRE(killed);
    CHECK(done_at_kill < bytes);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    REQUIRE(st->failed_sources.size() == 1);
    CHECK(st->failed_sources[0].rfind("a: ", 0) == 0);
    CHECK(st->bytes_per_source[1] > bytes / 2);
    CHECK(equal_bytes(*dst, expected(bytes, seed)));
  }

  TEST_CASE("with its only source killed, a read fails with a clear error within its timeout") {
    const std::uint64_t bytes = 128u << 20, chunk = 1u << 20, seed = 2;
    Source a("tcp", bytes, chunk, seed);
    Reader rd("tcp");
    auto ra = rd.describe(a);
    auto dst = rd.engine->allocate(bytes).value();
    bool killed = false;
    ReadOptions opt;
    opt.max_in_flight_per_source = 2;
    opt.op_timeout = Millis(3000);
    opt.total_timeout = Millis(20000);
    opt.progress_interval = Millis(0);
    opt.on_progress = [&](const ReadProgress& p) {
      if (!killed && p.bytes_done >= bytes / 8) {
        REQUIRE(a.proc->signal(SIGKILL).is_ok());
        killed = true;
      }
    };
    auto t0 = Clock::now();
    auto st =
        rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, opt);
    auto took = Clock::now() - t0;
    REQUIRE(killed);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.status().code() == Code::kUnavailable);
    CHECK(st.status().message().find("failed on every source: a: ") != std::string::npos);
    CHECK(took < opt.op_timeout + Millis(5000));

    // A read from a source that is already gone fails the same way, without hanging.
    auto again =
        rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, opt);
    REQUIRE_FALSE(again.is_ok());
    CHECK(again.status().code() == Code::kUnavailable);
  }

  TEST_CASE("a reader killed mid-read over tcp leaves its holder alive") {
    // The holder side of a reader's death. Each reader is a `sluice transfer-read`
    // process reading the whole region again and again; once its GETs are flowing (its first
    // progress line) the holder is stopped (SIGSTOP), the reader is SIGKILLed and the holder
    // continued, as on a loaded host where the holder is not scheduled while its reader dies:
    // it wakes to GET requests from a reader that is gone. The holder must keep running and
    // still serve a complete, correct read. tests/cli/reader_death.sh does the same at a larger
    // scale and prints the figures (UCX 1.13.1 GETs: the holder aborted in 14 of 40 kills, and
    // in 1 of 60 once readers kept one GET in flight to a tcp-only peer - see get_window() in
    // wire/transfer_source.cpp; tcp reads are chunk streams now, which the holder serves itself).
    if (!tcp_holder_survives_reader_death(TransferOptions{})) {
      auto v = ucx_version();
      MESSAGE("skipped: UCX " << v.major << "." << v.minor << "." << v.release
                              << " aborts a tcp holder whose reader dies mid-GET");
      return;
    }
    const std::uint64_t bytes = 64u << 20, chunk = 1u << 20, seed = 18;
    // About one kill in five brought UCX 1.13.1 down (6 of 30 in reader_death.sh): 20 kills
    // miss it with a chance of about 1 in 100.
    const int kills = 20;
    Source a("tcp", bytes, chunk, seed);
    for (int i = 0; i < kills; ++i) {
      CAPTURE(i);
      Subprocess::Options o;
      o.argv = {SLUICE_BIN, "--log-level", "debug", "transfer-read", "--from",
                a.endpoint, "--name",      "r",     "--repeat",      "1000"};
      o.extra_env = tls_env("tcp");
      o.stderr_to_stdout = true;
      auto reader = Subprocess::spawn(o).value();
      bool reading = false;
      while (!reading) {
        auto line = reader->read_line(Millis(30000));
        REQUIRE_MESSAGE(line.is_ok(),
                        "the reader never started reading: " << line.status().to_string());
        reading = line->find("transfer-read: ") != std::string::npos &&
                  line->find(" chunks)") != std::string::npos;
      }
      std::this_thread::sleep_for(Millis(50 * (i % 4)));  // at different points of a read
      REQUIRE(a.proc->signal(SIGSTOP).is_ok());
      std::this_thread::sleep_for(Millis(100));  // the reader sends GET requests that wait
      REQUIRE(reader->signal(SIGKILL).is_ok());
      REQUIRE(reader->wait(Millis(5000)).is_ok());
      REQUIRE(a.proc->signal(SIGCONT).is_ok());
      std::this_thread::sleep_for(Millis(300));  // the holder reads them and the reset
      REQUIRE_MESSAGE(a.proc->running(), "the holder died after reader " << i << " was killed");
    }
    Reader rd("tcp");
    auto ra = rd.describe(a);
    auto dst = rd.engine->allocate(bytes).value();
    auto st =
        rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, {});
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(st->bytes == bytes);
    CHECK(equal_bytes(*dst, expected(bytes, seed)));
    CHECK(a.proc->running());
  }

  TEST_CASE("over shared memory, a source that died before the read began fails it cleanly") {
    // The reader has the dead source's descriptor (as from a store that has not noticed yet)
    // but never read from it: its key is unpacked only now, after the segment is gone.
    const std::uint64_t bytes = 8u << 20, chunk = 1u << 20, seed = 5;
    Source a("sm", bytes, chunk, seed), b("sm", bytes, chunk, seed);
    Reader rd("sm");
    auto ra = rd.describe(a), rb = rd.describe(b);
    REQUIRE(a.proc->signal(SIGKILL).is_ok());
    REQUIRE(a.proc->wait(Millis(5000)).is_ok());
    auto dst = rd.engine->allocate(bytes).value();
    ReadOptions opt;
    opt.op_timeout = Millis(3000);
    opt.total_timeout = Millis(15000);
    auto only =
        rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, opt);
    REQUIRE_FALSE(only.is_ok());
    CHECK(only.status().code() == Code::kUnavailable);
    // With a live second source the read completes from it.
    auto st = rd.engine->read_sync({{"a", ra.descriptor}, {"b", rb.descriptor}},
                                   whole_region_chunks(ra.layout), *dst, opt);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(st->bytes_per_source[1] == bytes);
    CHECK(equal_bytes(*dst, expected(bytes, seed)));
  }

  TEST_CASE(
      "over shared memory, a descriptor that claims more than its holder registered is "
      "refused unread") {
    // A member that registers a forged descriptor (its own key, a base or length of its
    // choosing) must not make a same-host reader read outside the segment behind the key: that
    // reads another segment, the reader's own memory, or nothing (and the reader crashes).
    const std::uint64_t bytes = 4u << 20, chunk = 1u << 20, seed = 9;
    Source a("sm", bytes, chunk, seed);
    for (bool copy_mapped : {true, false}) {
      CAPTURE(copy_mapped);
      std::unique_ptr<EventLoop> loop = EventLoop::create().value();
      TransferOptions o;
      o.ucx_config = {{"TLS", "sm"}, {"NET_DEVICES", "lo"}};
      o.copy_mapped = copy_mapped;
      auto engine = TransferEngine::create(*loop, o).value();
      auto client = Client::create(*loop, a.endpoint, Security::plain()).value();
      auto region = describe_region(*client, "r", Millis(10000)).value();
      auto dst = engine->allocate(chunk).value();
      ReadOptions opt;
      opt.op_timeout = Millis(3000);
      opt.total_timeout = Millis(10000);
      std::uint64_t reported = 0;
      opt.on_chunk = [&](const ChunkRead&) { ++reported; };
      // A chunk 1 GiB past the segment, under a length that claims it; the same under a base
      // moved by 1 TiB; and one that straddles the segment's end.
      struct Forged {
        std::uint64_t base, length, offset;
      };
      const std::uint64_t b = region.descriptor.base;
      for (Forged f :
           {Forged{b, bytes + (2ull << 30), 1ull << 30}, Forged{b + (1ull << 40), bytes, 0},
            Forged{b, bytes + chunk, bytes - chunk / 2}}) {
        RegionDescriptor forged = region.descriptor;
        forged.base = f.base;
        forged.length = f.length;
        std::memset(dst->data(), 0xAB, dst->size());
        ChunkRead c;
        c.src_offset = f.offset;
        c.bytes = chunk;
        c.checksum = 1;
        auto st = engine->read_sync({{"forged", forged}}, {c}, *dst, opt);
        REQUIRE_FALSE(st.is_ok());
        CAPTURE(st.status().to_string());
        CHECK(st.status().message().find("outside the memory its holder registered") !=
              std::string::npos);
        CHECK(reported == 0);
        bool untouched = true;
        for (std::size_t i = 0; i < dst->size(); ++i)
          untouched = untouched && dst->data()[i] == 0xAB;
        CHECK(untouched);
      }
      // The true descriptor still reads.
      auto st = engine->read_sync({{"true", region.descriptor}}, whole_region_chunks(region.layout),
                                  *engine->allocate(bytes).value(), opt);
      CHECK_MESSAGE(st.is_ok(), st.status().to_string());
    }
  }

  TEST_CASE("a read cancelled from outside ends with the reason, before or while it runs") {
    // A pull whose lease renewal fails stops its read this way (weightstore/client.cpp).
    const std::uint64_t bytes = 32u << 20, chunk = 1u << 20, seed = 3;
    Source a("tcp", bytes, chunk, seed);
    Reader rd("tcp");
    auto ra = rd.describe(a);
    auto dst = rd.engine->allocate(bytes).value();
    ReadOptions opt;
    opt.max_in_flight_per_source = 1;
    opt.cancel = std::make_shared<ReadCancel>();
    std::uint64_t reported = 0;
    opt.on_chunk = [&](const ChunkRead&) {
      if (++reported == 2) opt.cancel->cancel(unavailable("lease 7 not renewed"));
    };
    auto st =
        rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, opt);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.status().message().find("lease 7 not renewed") != std::string::npos);
    CHECK(reported < bytes / chunk);
    // Cancelled before it starts: nothing is read.
    ReadOptions early;
    early.cancel = std::make_shared<ReadCancel>();
    early.cancel->cancel(unavailable("lease 8 not renewed"));
    reported = 0;
    early.on_chunk = [&](const ChunkRead&) { ++reported; };
    st = rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, early);
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.status().message().find("lease 8 not renewed") != std::string::npos);
    CHECK(reported == 0);
  }

  TEST_CASE("a reused buffer's new stream token refuses readers of the old one") {
    std::unique_ptr<EventLoop> loop = EventLoop::create().value();
    TransferOptions o;
    o.ucx_config = {{"TLS", "tcp"}, {"NET_DEVICES", "lo"}};
    auto holder = TransferEngine::create(*loop, o).value();
    auto reader = TransferEngine::create(*loop, o).value();
    const std::uint64_t bytes = 1u << 20;
    auto buf = holder->allocate(bytes).value();
    fill_pseudo_random(buf->data(), bytes, 1);
    const RegionDescriptor before = buf->descriptor();
    REQUIRE_FALSE(before.stream_token.empty());
    // Drained and reused for other bytes.
    REQUIRE(buf->rotate_stream_token().is_ok());
    fill_pseudo_random(buf->data(), bytes, 2);
    const RegionDescriptor after = buf->descriptor();
    CHECK(after.stream_token != before.stream_token);
    auto dst = reader->allocate(bytes).value();
    ChunkRead c;
    c.bytes = bytes;
    c.checksum = chunk_checksum(buf->data(), bytes);
    ReadOptions opt;
    opt.op_timeout = Millis(3000);
    auto stale = reader->read_sync({{"old", before}}, {c}, *dst, opt);
    CHECK_FALSE(stale.is_ok());
    auto fresh = reader->read_sync({{"new", after}}, {c}, *dst, opt);
    REQUIRE_MESSAGE(fresh.is_ok(), fresh.status().to_string());
    CHECK(std::memcmp(dst->data(), buf->data(), bytes) == 0);
    dst.reset();
    buf.reset();
  }

  TEST_CASE("stream_encryption: auto, on or off: on needs the job's keys") {
    CHECK(check_stream_encryption("auto", false, "x").is_ok());
    CHECK(check_stream_encryption("off", false, "x").is_ok());
    CHECK(check_stream_encryption("on", true, "x").is_ok());
    auto no_keys = check_stream_encryption("on", false, "job");
    CHECK(no_keys.code() == Code::kInvalidArgument);
    CHECK(no_keys.message().find("auth") != std::string::npos);
    CHECK(check_stream_encryption("yes", true, "x").code() == Code::kInvalidArgument);
    CHECK(StreamKeys::from_security(Security::plain()).status().code() ==
          Code::kFailedPrecondition);
  }

  TEST_CASE("stream_encryption auto encrypts between datacenters, and ends that disagree fail") {
    JobKeys job;
    JobKeys other;  // a holder of another job: a reader that encrypts refuses it
    std::unique_ptr<EventLoop> loop = EventLoop::create().value();
    auto engine = [&](const std::string& setting, const std::string& dc, const JobKeys& keys,
                      const std::string& identity) {
      TransferOptions o;
      o.ucx_config = {{"TLS", "tcp"}, {"NET_DEVICES", "lo"}};
      REQUIRE(set_stream_security(o, setting, dc, keys.security(identity), identity).is_ok());
      auto e = TransferEngine::create(*loop, o);
      REQUIRE_MESSAGE(e.is_ok(), e.status().to_string());
      return std::move(e).value();
    };
    const std::uint64_t bytes = 1u << 20;
    auto read = [&](TransferEngine& reader, const RegionDescriptor& d, std::uint64_t checksum) {
      auto dst = reader.allocate(bytes).value();
      ChunkRead c;
      c.bytes = bytes;
      c.checksum = checksum;
      ReadOptions opt;
      opt.op_timeout = Millis(3000);
      opt.total_timeout = Millis(10000);
      auto st = reader.read_sync({{"holder", d}}, {c}, *dst, opt);
      return st.is_ok() ? Status() : st.status();
    };
    auto stranger = engine("auto", "dc0", other, "relay-0");
    auto buf = stranger->allocate(bytes).value();
    fill_pseudo_random(buf->data(), bytes, 3);
    const std::uint64_t sum = chunk_checksum(buf->data(), bytes);
    const RegionDescriptor d = buf->descriptor();
    CHECK(d.stream_crypto == StreamCrypto::kEither);
    CHECK(d.datacenter == "dc0");
    // Within dc0 the read is clear and works; from dc1 it is encrypted, and the holder's key is
    // no member of this job: refused both ways.
    auto near = engine("auto", "dc0", job, "rollout-0");
    CHECK(read(*near, d, sum).is_ok());
    auto far = engine("auto", "dc1", job, "rollout-1");
    Status refused = read(*far, d, sum);
    CHECK_FALSE(refused.is_ok());
    CHECK_MESSAGE(refused.message().find("member") != std::string::npos, refused.to_string());
    // A holder with "on" is read encrypted by an auto reader, and refused by an "off" one.
    auto strict = engine("on", "dc0", job, "relay-0");
    auto sbuf = strict->allocate(bytes).value();
    fill_pseudo_random(sbuf->data(), bytes, 4);
    const std::uint64_t ssum = chunk_checksum(sbuf->data(), bytes);
    CHECK(sbuf->descriptor().stream_crypto == StreamCrypto::kEncrypted);
    CHECK(read(*near, sbuf->descriptor(), ssum).is_ok());
    auto clear = engine("off", "dc0", job, "rollout-1");
    Status mismatch = read(*clear, sbuf->descriptor(), ssum);
    CHECK_FALSE(mismatch.is_ok());
    CHECK_MESSAGE(mismatch.message().find("encrypted streams only") != std::string::npos,
                  mismatch.to_string());
    // "on" without keys is refused when the engine is made.
    TransferOptions no_keys;
    no_keys.stream_encryption = "on";
    CHECK(TransferEngine::create(*loop, no_keys).status().code() == Code::kInvalidArgument);
    buf.reset();
    sbuf.reset();
  }

  TEST_CASE("reads that do not fit are refused before anything moves") {
    Source a("tcp", 1u << 20, 1u << 16, 1);
    Reader rd("tcp");
    auto ra = rd.describe(a);
    auto small = rd.engine->allocate(1u << 16).value();
    auto chunks = whole_region_chunks(ra.layout);
    auto r = rd.engine->read_sync({{"a", ra.descriptor}}, chunks, *small, {});
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("does not fit the destination") != std::string::npos);

    auto dst = rd.engine->allocate(2u << 20).value();
    ChunkRead past;
    past.src_offset = (1u << 20) - 10;
    past.bytes = 100;
    r = rd.engine->read_sync({{"a", ra.descriptor}}, {past}, *dst, {});
    CHECK(r.status().message().find("outside the region of source a") != std::string::npos);
    r = rd.engine->read_sync({}, chunks, *dst, {});
    CHECK(r.status().message().find("no sources") != std::string::npos);
  }

  TEST_CASE("every chunk is reported once, verified, before the read is done") {
    for (const char* tls : {"tcp", "sm"}) {
      CAPTURE(tls);
      Source a(tls, (3u << 20) + 5, 1u << 18, 21);
      Reader rd(tls);
      auto ra = rd.describe(a);
      auto dst = rd.engine->allocate(ra.layout.bytes).value();
      std::vector<int> seen(ra.layout.chunk_count(), 0);
      bool all_good = true;
      bool done = false;
      ReadOptions o;
      o.on_chunk = [&](const ChunkRead& c) {
        CHECK_FALSE(done);
        const std::uint64_t k = c.dst_offset / ra.layout.chunk_bytes;
        ++seen[k];
        // Its bytes are final when it is reported.
        all_good = all_good &&
                   chunk_checksum(dst->data() + c.dst_offset, c.bytes) == ra.layout.checksums[k];
      };
      auto r =
          rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, o);
      done = true;
      REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
      CHECK(all_good);
      CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
  }

  TEST_CASE("device memory is registered only where UCX has CUDA support") {
    Reader rd("sm,self");
    auto host = rd.engine->allocate(1 << 16).value();
    CHECK_FALSE(host->device());
    if (cuda_devices().count == 0) {
      // Nothing to page-lock host memory for.
      CHECK(host->pin_for_device().code() == Code::kFailedPrecondition);
      CHECK_FALSE(host->pinned());
    }
    if (rd.engine->cuda_memory()) {
      MESSAGE("skipped: this UCX has CUDA support (the refusal is for UCX without it)");
      return;
    }
    int dummy = 0;
    auto b = rd.engine->wrap_device(&dummy, sizeof dummy);
    REQUIRE_FALSE(b.is_ok());
    CHECK(b.status().code() == Code::kFailedPrecondition);
    CHECK(b.status().message().find("pinned host") != std::string::npos);
  }

  TEST_CASE("a peer cannot write into a holder's memory over the network") {
    // Remote memory is readable, never writable. A holder serves tcp readers over its
    // chunk stream, which has no write, and gives UCX no tcp: UCX 1.13 over tcp lets a peer with
    // the key PUT into memory registered for remote reads only (measured before this design).
    // Here a peer with the holder's worker address and key tries a UCX PUT over tcp.
    const std::uint64_t bytes = 1u << 20, chunk = 256u << 10, seed = 19;
    Source a("tcp", bytes, chunk, seed);
    Reader rd("tcp");
    auto ra = rd.describe(a);
    REQUIRE_FALSE(ra.descriptor.stream.empty());

    auto ctx = ucx::Context::create(false, {{"TLS", "tcp"}, {"NET_DEVICES", "lo"}}).value();
    auto worker = ucx::Worker::create(*ctx).value();
    std::string refused;
    auto ep = ucx::Endpoint::connect(*worker, ra.descriptor.worker_address, nullptr, nullptr, true);
    if (!ep.is_ok()) {
      refused = ep.status().to_string();
    } else {
      auto key = ucx::RemoteKey::unpack((*ep)->get(), ra.descriptor.rkey);
      if (!key.is_ok()) {
        refused = key.status().to_string();
      } else {
        std::string junk(4096, 'W');
        ucp_request_param_t p{};
        ucs_status_ptr_t r = ucp_put_nbx((*ep)->get(), junk.data(), junk.size(), ra.descriptor.base,
                                         (*key)->get(), &p);
        ucs_status_t st = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_OK;
        if (r && !UCS_PTR_IS_ERR(r)) {
          for (int i = 0; i < 1000000 && ucp_request_check_status(r) == UCS_INPROGRESS; ++i)
            worker->progress();
          st = ucp_request_check_status(r);
          ucp_request_free(r);
        }
        if (st != UCS_OK) refused = ucs_status_string(st);
      }
    }
    MESSAGE("the write was refused: " << refused);
    CHECK_FALSE(refused.empty());

    // Whatever the attempt did, the holder's bytes are still its own.
    auto dst = rd.engine->allocate(bytes).value();
    auto st =
        rd.engine->read_sync({{"a", ra.descriptor}}, whole_region_chunks(ra.layout), *dst, {});
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(equal_bytes(*dst, expected(bytes, seed)));
  }
}
