// The relay's state machine driven directly: synthetic time, no store, no reads. The test plays
// the store and the sources, and checks the relay's rows of the recovery table: a source that
// fails is set aside and another asked for, a store restart is joined again, a version without
// progress is given up, copies beyond keep_versions go only once nothing is in flight for them,
// and a host share reads the right bytes from either kind of source.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "format/shard.hpp"
#include "relay/relay_state.hpp"

using namespace sluice;
using namespace sluice::relay;
using std::chrono::milliseconds;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(int ms) {
  return kT0 + milliseconds(ms);
}

constexpr std::uint64_t kChunk = 1024;

// One F32 tensor of `floats` elements (4 chunks by default).
core::Manifest manifest(std::uint64_t version, std::uint64_t floats = 1024) {
  std::vector<std::uint8_t> bytes(floats * 4);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {floats}, 0, floats * 4};
  return core::make_manifest("m", version, {t}, bytes.data(), bytes.size(), kChunk).value();
}

RelayConfig config() {
  RelayConfig c;
  c.relay_id = "r1";
  c.model = "m";
  c.in_flight = 3;
  c.keep_versions = 2;
  c.abandon_after_ms = 1000;
  REQUIRE(c.validate().is_ok());
  return c;
}

template <class T>
std::vector<T> all(const Actions& as) {
  std::vector<T> out;
  for (const auto& a : as)
    if (const T* t = std::get_if<T>(&a)) out.push_back(*t);
  return out;
}

// A joined relay that holds nothing yet.
RelayState joined(RelayConfig c) {
  RelayState s(std::move(c));
  auto first = s.housekeeping(kT0);
  REQUIRE(first.size() == 1);
  REQUIRE(std::holds_alternative<action::Join>(first[0]));
  CHECK_FALSE(std::get<action::Join>(first[0]).again);
  s.joined();
  CHECK(all<action::Heartbeat>(s.housekeeping(kT0)).size() == 1);
  return s;
}

// Starts `m` the way the service does: latest seen, prepared, added.
void start(RelayState& s, const core::Manifest& m, Clock::time_point now) {
  auto as = s.latest_seen(m.version, now);
  REQUIRE(all<action::StartVersion>(as).size() == 1);
  auto c = s.prepare(m);
  REQUIRE_MESSAGE(c.is_ok(), c.status().to_string());
  s.add(std::move(c).value(), now);
}

NamedSource source(const std::string& id, std::size_t chunks, std::string model = "") {
  NamedSource n;
  n.holder_id = id;
  n.model = std::move(model);
  n.distance = 0;
  n.chunks.assign(chunks, true);
  return n;
}

std::set<std::uint32_t> chunks_read(const Actions& as, const std::string& from) {
  std::set<std::uint32_t> out;
  for (const auto& r : all<action::ReadChunk>(as)) {
    CHECK(r.source == from);
    out.insert(r.chunk);
  }
  return out;
}

}  // namespace

TEST_SUITE("relay state") {
  TEST_CASE("a source that fails mid-version is set aside and another is asked for") {
    RelayState s = joined(config());
    const auto m = manifest(1);
    start(s, m, kT0);
    auto asks = all<action::AskSource>(s.tick(kT0));
    REQUIRE(asks.size() == 1);
    CHECK(asks[0].request.version == 1);
    CHECK(asks[0].request.exclude.empty());
    CHECK(all<action::AskSource>(s.tick(at(1))).empty());  // one question at a time

    // Source a: in_flight reads at once.
    auto as = s.source_named(1, source("a", 4), at(1));
    CHECK(chunks_read(as, "a") == std::set<std::uint32_t>{0, 1, 2});
    as = s.chunk_done(1, 0, "a", true, at(2));
    REQUIRE(all<action::ReportChunks>(as).size() == 1);
    CHECK(all<action::ReportChunks>(as)[0].add.chunks == std::vector<std::uint32_t>{0});
    CHECK(chunks_read(as, "a") == std::set<std::uint32_t>{3});

    // Chunk 1 fails: a is set aside and the store is asked for another, excluding it.
    as = s.chunk_done(1, 1, "a", false, at(3));
    CHECK(all<action::ReadChunk>(as).empty());
    asks = all<action::AskSource>(as);
    REQUIRE(asks.size() == 1);
    CHECK(asks[0].request.exclude == std::set<std::string>{"a"});
    // Another read from a fails too: no second question while one is out.
    CHECK(all<action::AskSource>(s.chunk_done(1, 2, "a", false, at(4))).empty());

    // Source b takes the missing chunks (chunk 3 is still on its way from a).
    as = s.source_named(1, source("b", 4), at(5));
    CHECK(chunks_read(as, "b") == std::set<std::uint32_t>{1, 2});
    CHECK(all<action::Completed>(s.chunk_done(1, 3, "a", true, at(6))).empty());
    CHECK(all<action::Completed>(s.chunk_done(1, 1, "b", true, at(7))).empty());
    as = s.chunk_done(1, 2, "b", true, at(8));
    REQUIRE(all<action::Completed>(as).size() == 1);
    CHECK(all<action::Completed>(as)[0].version == 1);
    const CopyState* c = s.find(1);
    REQUIRE(c);
    CHECK(c->complete);
    CHECK(std::count(c->have.begin(), c->have.end(), true) == 4);
    // A complete copy reads nothing more and asks nothing more.
    CHECK(all<action::ReadChunk>(s.tick(at(100))).empty());
    CHECK(all<action::AskSource>(s.tick(at(200))).empty());
  }

  TEST_CASE("a relay follows a source that is still receiving") {
    RelayState s = joined(config());
    start(s, manifest(1), kT0);
    s.tick(kT0);
    NamedSource half = source("a", 4);
    half.chunks = {true, false, false, false};
    auto as = s.source_named(1, half, at(1));
    CHECK(chunks_read(as, "a") == std::set<std::uint32_t>{0});
    // Everything it has is on its way: asked again after follow_poll_ms, not before.
    CHECK(all<action::AskSource>(s.tick(at(2))).empty());
    CHECK(all<action::AskSource>(s.tick(at(1 + 3))).size() == 1);
    half.chunks = {true, true, true, false};
    as = s.source_named(1, half, at(5));
    CHECK(chunks_read(as, "a") == std::set<std::uint32_t>{1, 2});
  }

  TEST_CASE("after a store restart the relay joins again and loses no chunk it reported") {
    RelayConfig cfg = config();
    cfg.make_deltas = true;
    RelayState s = joined(cfg);
    start(s, manifest(1), kT0);
    s.tick(kT0);
    s.source_named(1, source("a", 4), at(1));
    auto as = s.chunk_done(1, 0, "a", true, at(2));
    REQUIRE(all<action::ReportChunks>(as).size() == 1);
    s.chunk_done(1, 1, "a", true, at(3));  // batched while the first report is out

    // The store restarted: a heartbeat hears it forgot the relay.
    as = s.store_forgot(at(10));
    REQUIRE(as.size() == 1);
    REQUIRE(std::holds_alternative<action::Join>(as[0]));
    CHECK(std::get<action::Join>(as[0]).again);
    // The report that was out failed with it: reported again with the one that waited.
    as = s.report_done(1, {0}, false, at(11));
    auto reports = all<action::ReportChunks>(as);
    REQUIRE(reports.size() == 1);
    auto sent = reports[0].add.chunks;
    std::sort(sent.begin(), sent.end());
    CHECK(sent == std::vector<std::uint32_t>{0, 1});
    // The copy is as it was.
    const CopyState* c = s.find(1);
    REQUIRE(c);
    CHECK(c->have == std::vector<bool>{true, true, false, false});
    // Deltas are offered again one heartbeat later, once.
    CHECK(all<action::ReofferDeltas>(s.housekeeping(at(100))).empty());
    CHECK(all<action::ReofferDeltas>(s.housekeeping(at(260))).size() == 1);
    CHECK(all<action::ReofferDeltas>(s.housekeeping(at(600))).empty());
  }

  TEST_CASE("a version without progress for abandon_after_ms is given up for a newer one") {
    RelayState s = joined(config());
    start(s, manifest(1), kT0);
    s.tick(kT0);
    s.source_named(1, source("a", 4), at(1));
    s.chunk_done(1, 0, "a", true, at(100));
    s.report_done(1, {0}, true, at(101));
    // Version 2 is out, but 1 is progressing: one version at a time.
    CHECK(s.latest_seen(2, at(500)).empty());
    CHECK(s.latest_seen(2, at(1000)).empty());
    // No chunk since 100: given up at 1100 for version 2.
    auto as = s.latest_seen(2, at(1100));
    auto gave_up = all<action::GiveUp>(as);
    REQUIRE(gave_up.size() == 1);
    CHECK(gave_up[0].version == 1);
    CHECK(gave_up[0].have == 1);
    CHECK(gave_up[0].chunks == 4);
    REQUIRE(all<action::StartVersion>(as).size() == 1);
    CHECK(all<action::StartVersion>(as)[0].version == 2);
    s.add(s.prepare(manifest(2)).value(), at(1100));

    // Its reads still in flight keep it; no new read starts for it.
    as = s.tick(at(1101));
    CHECK(all<action::Retire>(as).empty());
    for (const auto& r : all<action::ReadChunk>(as))
      CHECK(r.version == 2);
    CHECK(s.chunk_done(1, 1, "a", false, at(1200)).empty());
    s.chunk_done(1, 2, "a", false, at(1201));
    s.chunk_done(1, 3, "a", false, at(1202));
    // Its last question to the store (asked at 100) is still out.
    CHECK(s.find(1)->asking);
    CHECK(all<action::Retire>(s.tick(at(1202))).empty());
    s.source_unknown(1);
    // Now nothing refers to it: retired, without dropping deltas (it made none).
    auto retired = all<action::Retire>(s.tick(at(1203)));
    REQUIRE(retired.size() == 1);
    CHECK(retired[0].version == 1);
    CHECK_FALSE(retired[0].drop_deltas);
    CHECK(s.find(1) == nullptr);
    REQUIRE(s.find(2));
    CHECK_FALSE(s.find(2)->abandoned);
  }

  TEST_CASE("copies beyond keep_versions are retired once nothing is in flight for them") {
    RelayConfig cfg = config();
    cfg.keep_versions = 1;
    cfg.use_deltas = false;
    RelayState s = joined(cfg);
    start(s, manifest(1), kT0);
    s.tick(kT0);
    s.source_named(1, source("a", 4), at(1));
    for (std::uint32_t i = 0; i < 4; ++i)
      s.chunk_done(1, i, "a", true, at(2));
    REQUIRE(s.find(1)->complete);
    REQUIRE(s.find(1)->reporting);  // its chunks are not all reported yet

    start(s, manifest(2), at(10));
    // Version 1's report is out: kept.
    CHECK(all<action::Retire>(s.tick(at(11))).empty());
    REQUIRE(s.find(1));
    // The report comes back with the rest to send: still kept until those are reported.
    auto as = s.report_done(1, {0}, true, at(12));
    REQUIRE(all<action::ReportChunks>(as).size() == 1);
    CHECK(all<action::Retire>(s.tick(at(13))).empty());
    s.report_done(1, {1, 2, 3}, true, at(14));
    auto retired = all<action::Retire>(s.tick(at(15)));
    REQUIRE(retired.size() == 1);
    CHECK(retired[0].version == 1);
    CHECK(retired[0].drop_deltas);
    CHECK(s.find(1) == nullptr);
    // A late answer about it changes nothing.
    CHECK(s.report_done(1, {0}, true, at(16)).empty());
    CHECK(s.chunk_done(1, 0, "a", true, at(16)).empty());
    // Version 2 makes no progress: given up for 3, and retired once its question is answered.
    start(s, manifest(3, 2048), at(20000));
    CHECK(all<action::Retire>(s.tick(at(20001))).empty());
    s.source_unknown(2);
    auto gone = all<action::Retire>(s.tick(at(20002)));
    REQUIRE(gone.size() == 1);
    CHECK(gone[0].version == 2);
    REQUIRE(s.find(3));
    CHECK(s.copies().size() == 1);
  }

  TEST_CASE(
      "a relay asks a remote source's version as a delta, waits for one expected, then reads") {
    RelayState s = joined(config());
    start(s, manifest(1), kT0);
    s.tick(kT0);
    s.source_named(1, source("a", 4), at(1));
    for (std::uint32_t i = 0; i < 4; ++i)
      s.chunk_done(1, i, "a", true, at(2));
    REQUIRE(s.find(1)->complete);

    // Version 2 from a source in another datacenter: a delta against 1, no chunk read meanwhile.
    start(s, manifest(2), at(1000));
    s.tick(at(1000));
    NamedSource far = source("far", 4);
    far.distance = 3;
    auto as = s.source_named(2, far, at(1001));
    CHECK(all<action::ReadChunk>(as).empty());
    auto deltas = all<action::AskDelta>(as);
    REQUIRE(deltas.size() == 1);
    CHECK(deltas[0].version == 2);
    CHECK(deltas[0].base == 1);
    CHECK(s.find(1)->lent == 1);  // the base stays while the delta is read
    CHECK(s.find(1)->busy());

    // None yet, but one is expected: asked again, up to delta_wait_ms after the version began.
    as = s.delta_done(2, 1, DeltaOutcome::kExpected, {}, at(1100));
    CHECK(all<action::AskDelta>(as).size() == 1);
    CHECK(all<action::ReadChunk>(as).empty());
    as = s.delta_done(2, 1, DeltaOutcome::kExpected, {}, at(1000 + 5000));
    CHECK(all<action::AskDelta>(as).empty());
    CHECK(chunks_read(as, "far") == std::set<std::uint32_t>{0, 1, 2});
    CHECK(s.find(1)->lent == 0);
  }

  TEST_CASE("a delta that rebuilt some chunks leaves the rest to full reads") {
    RelayState s = joined(config());
    start(s, manifest(1), kT0);
    s.tick(kT0);
    s.source_named(1, source("a", 4), at(1));
    for (std::uint32_t i = 0; i < 4; ++i)
      s.chunk_done(1, i, "a", true, at(2));
    start(s, manifest(2), at(1000));
    s.tick(at(1000));
    NamedSource far = source("far", 4);
    far.distance = 3;
    REQUIRE(all<action::AskDelta>(s.source_named(2, far, at(1001))).size() == 1);
    auto as = s.delta_done(2, 1, DeltaOutcome::kRead, {true, false, true, false}, at(1200));
    auto reports = all<action::ReportChunks>(as);
    REQUIRE(reports.size() == 1);
    CHECK(reports[0].add.chunks == std::vector<std::uint32_t>{0, 2});
    CHECK(chunks_read(as, "far") == std::set<std::uint32_t>{1, 3});
    CHECK(s.find(2)->progressed == at(1200));
  }

  TEST_CASE("a relay that another datacenter reads from makes deltas with no setting") {
    for (bool told : {false, true}) {
      for (bool allowed : {false, true}) {
        CAPTURE(told);
        CAPTURE(allowed);
        RelayConfig cfg = config();  // make_deltas false, as by default
        cfg.deltas_for_other_datacenters = allowed;
        RelayState s = joined(cfg);
        for (std::uint64_t v : {1, 2}) {
          start(s, manifest(v), at(1000 * static_cast<int>(v)));
          s.tick(at(1000 * static_cast<int>(v)));
          NamedSource src = source("a", 4);
          src.feeds_other_datacenter = told;
          s.source_named(v, src, at(1000 * static_cast<int>(v) + 1));
          Actions as;
          for (std::uint32_t i = 0; i < 4; ++i) {
            auto more = s.chunk_done(v, i, "a", true, at(1000 * static_cast<int>(v) + 2));
            as.insert(as.end(), more.begin(), more.end());
          }
          auto done = all<action::Completed>(as);
          REQUIRE(done.size() == 1);
          // Version 2 completes with 1 held: the delta 1 -> 2 is made only when told and allowed.
          const bool made = done[0].delta_base.has_value();
          CHECK(made == (v == 2 && told && allowed));
          if (made) CHECK(*done[0].delta_base == 1);
        }
      }
    }
  }

  TEST_CASE("a near source is read in full, never as a delta") {
    RelayState s = joined(config());
    start(s, manifest(1), kT0);
    s.tick(kT0);
    s.source_named(1, source("a", 4), at(1));
    for (std::uint32_t i = 0; i < 4; ++i)
      s.chunk_done(1, i, "a", true, at(2));
    start(s, manifest(2), at(1000));
    s.tick(at(1000));
    auto as = s.source_named(2, source("near", 4), at(1001));
    CHECK(all<action::AskDelta>(as).empty());
    CHECK(chunks_read(as, "near") == std::set<std::uint32_t>{0, 1, 2});
  }

  TEST_CASE("a host share reads pieces from a whole source and chunks from a share source") {
    // rows, columns and replicated tensors; rank 1 of tp 2 is a share of three chunks.
    const std::vector<core::TensorSpec> tensors = {
        {"embed", "F32", {64, 16}, 0, 64 * 16 * 4},
        {"wo", "F32", {16, 16}, 64 * 16 * 4, 16 * 16 * 4},
        {"norm", "F32", {1, 16}, (64 * 16 + 16 * 16) * 4, 16 * 4},
    };
    const std::uint64_t total = (64 * 16 + 16 * 16 + 16) * 4;
    std::vector<std::uint8_t> bytes(total);
    for (std::uint64_t i = 0; i < total; ++i)
      bytes[i] = static_cast<std::uint8_t>(i * 7 + i / 251);
    auto m = core::make_manifest("policy", 1, tensors, bytes.data(), total, kChunk).value();
    core::ShardLayout l;
    l.tp_size = 2;
    l.splits = {{"embed", core::Split::kRows}, {"wo", core::Split::kColumns}};
    for (std::uint32_t r = 0; r < 2; ++r) {
      l.tp_rank = r;
      REQUIRE(core::add_shard_checksums(m, l, bytes.data()).is_ok());
    }

    RelayConfig cfg = config();
    cfg.share_tp_size = 2;
    cfg.share_rank = 1;
    cfg.in_flight = 8;
    RelayState s = joined(cfg);
    start(s, m, kT0);
    const CopyState* c = s.find(1);
    REQUIRE(c);
    REQUIRE(c->parent);
    CHECK(core::is_share_model(c->manifest.model));
    const std::uint64_t share_chunks = c->manifest.chunk_count();
    REQUIRE(share_chunks >= 2);
    auto asks = all<action::AskSource>(s.tick(kT0));
    REQUIRE(asks.size() == 1);
    CHECK(asks[0].request.model == c->manifest.model);

    // A holder of another model is no source.
    CHECK(s.source_named(1, source("x", 6, "other"), at(1)).empty());
    s.tick(at(20));

    // The head of the share's chain reads the pieces from a whole holder: applied to the whole
    // version's bytes they assemble each chunk to the checksum the actor declared.
    auto reads = all<action::ReadChunk>(s.source_named(1, source("whole", 6, "policy"), at(21)));
    REQUIRE(reads.size() == share_chunks);
    std::vector<std::uint8_t> share(c->manifest.total_bytes);
    for (const auto& r : reads) {
      CHECK(r.source == "whole");
      CHECK(r.pieces);
      CHECK(r.reads.size() >= 1);
      for (const auto& p : r.reads) {
        CHECK(p.dst_offset >= r.offset);
        CHECK(p.dst_offset + p.bytes <= r.offset + r.bytes);
        REQUIRE(p.src_offset + p.bytes <= total);
        std::memcpy(share.data() + p.dst_offset, bytes.data() + p.src_offset, p.bytes);
      }
      CHECK(core::chunk_checksum(share.data() + r.offset, r.bytes) == r.checksum);
      CHECK(r.checksum == c->manifest.checksums[r.chunk]);
    }
    // The whole holder fails chunk 0: the next source, of the same share, serves whole chunks.
    s.chunk_done(1, 0, "whole", false, at(22));
    for (std::uint32_t i = 1; i < share_chunks; ++i)
      s.chunk_done(1, i, "whole", true, at(23));
    auto as = s.source_named(1, source("r0", share_chunks), at(24));
    reads = all<action::ReadChunk>(as);
    REQUIRE(reads.size() == 1);
    CHECK(reads[0].chunk == 0);
    CHECK(reads[0].source == "r0");
    CHECK_FALSE(reads[0].pieces);
    REQUIRE(reads[0].reads.size() == 1);
    CHECK(reads[0].reads[0].src_offset == 0);
    CHECK(reads[0].reads[0].bytes == reads[0].bytes);
    CHECK(reads[0].reads[0].checksum == c->manifest.checksums[0]);
    CHECK(all<action::Completed>(s.chunk_done(1, 0, "r0", true, at(25))).size() == 1);
  }

  TEST_CASE("a host share of a version that declares no layout of its size is refused") {
    RelayConfig cfg = config();
    cfg.share_tp_size = 2;
    RelayState s(cfg);
    auto c = s.prepare(manifest(1));
    REQUIRE_FALSE(c.is_ok());
    CHECK(c.status().code() == core::Code::kFailedPrecondition);
    CHECK(s.copies().empty());
  }
}
