// The rollout's reader client against a real store process and a publisher: versions pulled in
// the background while the caller keeps working, switched only at swap(), byte for byte; a reader
// serving its current version to peers; its old copy withdrawn from the store at a swap and freed
// only once readers of it are done; and clear errors for versions that were never committed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "../support/store_process.hpp"
#include "../support/test_weights.hpp"
#include "actor/publisher.hpp"
#include "core/units.hpp"
#include "weightstore/reader.hpp"

using namespace sluice;
using core::Millis;

namespace {

constexpr std::uint64_t kChunk = 64 * 1024;

using testing::views;
using testing::weights;

bool same(std::span<const std::uint8_t> got, const std::vector<std::uint8_t>& want) {
  return got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0;
}

// Engines in one process talk over shared memory: with TCP lanes as well, UCX 1.13 can abort
// while destroying a worker whose TCP wire-up is still in flight (seen once under ASAN).
core::TransferOptions same_host() {
  core::TransferOptions o;
  o.ucx_config = {{"TLS", "sm,self"}};
  return o;
}

// A store process; a publisher of "policy" on host "trainer"; readers, each with its own
// transfer engine (as a rollout process would have), all on one loop and one store client. A
// loop timer sends every holder's heartbeat, as the roles do, so no holder expires mid-test.
struct Setup {
  testing::StoreProcess store;
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<core::TransferEngine> engine =
      core::TransferEngine::create(*loop, same_host()).value();
  std::unique_ptr<weightstore::StoreClient> client =
      weightstore::StoreClient::create(*loop, store.endpoint, core::Security::plain()).value();
  std::unique_ptr<actor::Publisher> pub;
  std::vector<std::unique_ptr<core::TransferEngine>> engines;
  std::vector<std::unique_ptr<weightstore::Reader>> readers;  // before their engines go
  std::unique_ptr<core::EventLoop::Timer> heartbeats;

  explicit Setup(std::uint32_t keep_versions = 4) {
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-0";
    po.chunk_bytes = kChunk;
    po.keep_versions = keep_versions;
    po.topology.host = "trainer";
    pub = actor::Publisher::create(*loop, *engine, *client, po).value();
    heartbeats = loop->every(Millis(500), [this] {
      pub->heartbeat();
      for (auto& r : readers)
        r->heartbeat();
    });
  }

  weightstore::Reader* reader(const std::string& id, const std::string& host, bool serve = true,
                              Millis local_wait = Millis(0)) {
    engines.push_back(core::TransferEngine::create(*loop, same_host()).value());
    weightstore::ReaderOptions ro;
    ro.model = "policy";
    ro.holder_id = id;
    ro.topology.host = host;
    ro.endpoint = "test:" + id;
    ro.serve = serve;
    ro.drain_check = Millis(50);
    ro.drain_timeout = Millis(20000);
    ro.local_wait = local_wait;
    auto r = weightstore::Reader::create(*loop, *engines.back(), *client, ro);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    readers.push_back(std::move(r).value());
    return readers.back().get();
  }

  void publish(std::uint64_t v, const std::vector<std::uint8_t>& w) {
    auto m = pub->publish(v, views(w));
    REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  }

  // The holder ids a fresh plan for `version` names for a reader at `host` (lease released).
  std::vector<std::string> plan_holders(std::uint64_t version, const std::string& host) {
    auto plan = client->plan("policy", version, {host, "", ""});
    std::vector<std::string> ids;
    if (!plan.is_ok()) return ids;
    for (const auto& h : plan->holders)
      ids.push_back(h.holder_id);
    CHECK(client->release(plan->lease_id).is_ok());
    return ids;
  }
};

bool names(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

TEST_SUITE("weightstore.reader") {
  TEST_CASE("pull_latest stages in the background and the version switches only at swap") {
    Setup s;
    auto w1 = weights(1, 8u << 20), w2 = weights(2, (8u << 20) + 12);
    s.publish(1, w1);
    auto reader = s.reader("rollout-0", "node-1");
    CHECK(reader->current_version() == 0);
    CHECK(reader->current_bytes().empty());
    auto pulled = reader->pull();
    REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
    CHECK(*pulled == 1);
    CHECK(reader->current_version() == 0);  // staged, not yet in use
    REQUIRE(reader->swap().value() == 1);
    CHECK(same(reader->current_bytes(), w1));

    s.publish(2, w2);
    // The caller's own work: a loop timer that keeps firing while the pull runs.
    std::size_t ticks = 0, ticks_while_pulling = 0;
    auto work = s.loop->every(Millis(1), [&] {
      ++ticks;
      if (reader->pulling()) ++ticks_while_pulling;
    });
    std::optional<core::Result<std::uint64_t>> done;
    std::size_t ticks_at_done = 0;
    reader->pull_latest([&](core::Result<std::uint64_t> r) {
      ticks_at_done = ticks_while_pulling;
      done.emplace(std::move(r));
    });
    CHECK(reader->pulling());  // pull_latest returned before the pull ended
    REQUIRE(s.loop->run_until([&] { return done.has_value(); }, Millis(20000)));
    REQUIRE_MESSAGE(done->is_ok(), done->status().to_string());
    CHECK(**done == 2);
    CHECK(ticks_at_done > 0);
    // Staged, but the caller is still on version 1, bytes untouched.
    CHECK(reader->staged_version() == 2);
    CHECK(reader->current_version() == 1);
    CHECK(reader->current_manifest()->version == 1);
    CHECK(same(reader->current_bytes(), w1));

    // Nothing newer: answered without a read, staged version kept.
    done.reset();
    reader->pull_latest([&](core::Result<std::uint64_t> r) { done.emplace(std::move(r)); });
    REQUIRE(s.loop->run_until([&] { return done.has_value(); }, Millis(5000)));
    CHECK(done->value() == 2);
    CHECK(reader->staged_version() == 2);
    work.reset();

    REQUIRE(reader->swap().value() == 2);
    CHECK(reader->current_version() == 2);
    CHECK(reader->staged_version() == 0);
    CHECK(reader->current_manifest()->total_bytes == w2.size());
    CHECK(same(reader->current_bytes(), w2));
    auto head = reader->current_tensor("layer1.weight");
    REQUIRE(head.is_ok());
    std::uint64_t half = (w2.size() / 2) & ~std::uint64_t{3};
    CHECK(head->size() == w2.size() - half);
    CHECK(std::memcmp(head->data(), w2.data() + half, head->size()) == 0);
    CHECK(reader->current_tensor("no.such").status().code() == core::Code::kNotFound);
    // Nothing staged any more: a second swap is refused and changes nothing.
    CHECK(reader->swap().status().code() == core::Code::kFailedPrecondition);
    CHECK(reader->current_version() == 2);
    CHECK(reader->close().is_ok());
    CHECK(reader->current_version() == 0);
  }

  TEST_CASE("a reader serves its current version to peers") {
    Setup s(1);  // the publisher keeps one version: publishing 2 withdraws its copy of 1
    auto w1 = weights(1, 4u << 20), w2 = weights(2, 4u << 20);
    s.publish(1, w1);
    auto a = s.reader("rollout-a", "node-1");
    REQUIRE(a->pull(1).is_ok());
    REQUIRE(a->swap().is_ok());
    REQUIRE(s.loop->run_until([&] { return a->serving(); }, Millis(5000)));

    // B on A's host: the store ranks A first, and B's read takes bytes from A.
    auto b = s.reader("rollout-b", "node-1", false);
    auto ids = s.plan_holders(1, "node-1");
    REQUIRE(ids.size() == 2);
    CHECK(ids[0] == "rollout-a");
    CHECK(ids[1] == "actor-0");
    REQUIRE(b->pull(1).is_ok());
    REQUIRE(b->swap().is_ok());
    CHECK(same(b->current_bytes(), w1));
    REQUIRE(b->last_stats().bytes_per_source.size() == 2);
    CHECK(b->last_stats().bytes_per_source[0] > 0);  // served by A
    CHECK(b->last_stats().bytes_per_source[0] + b->last_stats().bytes_per_source[1] == w1.size());
    // Both are verified copies of this user on this host (the actor made its bytes, A verified
    // what it pulled): B checks them by checksum alone.
    CHECK(b->last_stats().checksum_only_bytes == w1.size());
    CHECK(b->last_stats().owner_unconfirmed == 0);

    // The publisher moves on and withdraws its copy of 1: A is then the only holder of 1, and a
    // reader elsewhere gets every byte from A.
    s.publish(2, w2);
    REQUIRE(s.loop->run_until([&] { return s.pub->retiring() == 0; }, Millis(5000)));
    CHECK(s.plan_holders(1, "node-2") == std::vector<std::string>{"rollout-a"});
    auto c = s.reader("rollout-c", "node-2", false);
    REQUIRE(c->pull(1).is_ok());
    REQUIRE(c->swap().is_ok());
    CHECK(same(c->current_bytes(), w1));
    REQUIRE(c->last_stats().bytes_per_source.size() == 1);
    CHECK(c->last_stats().bytes_per_source[0] == w1.size());
    CHECK(a->close().is_ok());
    CHECK(s.plan_holders(1, "node-2").empty());  // nobody serves 1 any more
  }

  TEST_CASE("with local_wait, a new version is read from a holder on this host, else later") {
    Setup s;
    auto w1 = weights(1, 2u << 20), w2 = weights(2, 2u << 20);
    const Millis wait(1500);
    auto r = s.reader("rollout-0", "node-1", false, wait);
    auto pull_latest = [&]() -> core::Result<std::uint64_t> {
      std::optional<core::Result<std::uint64_t>> done;
      r->pull_latest([&](core::Result<std::uint64_t> v) { done.emplace(std::move(v)); });
      REQUIRE(s.loop->run_until([&] { return done.has_value(); }, Millis(10000)));
      return std::move(*done);
    };

    // Version 1 is held on the trainer's host only: nothing is read until the wait has passed
    // (each call answers at once with what is held), then it comes from there.
    s.publish(1, w1);
    auto t0 = core::Clock::now();
    auto first = pull_latest();
    REQUIRE_MESSAGE(first.is_ok(), first.status().to_string());
    CHECK(*first == 0);
    CHECK(r->staged_version() == 0);
    while (r->staged_version() == 0 && core::Clock::now() - t0 < Millis(8000)) {
      REQUIRE(pull_latest().is_ok());
      s.loop->run_until([] { return false; }, Millis(50));
    }
    CHECK(core::Clock::now() - t0 >= wait);
    REQUIRE(r->staged_version() == 1);
    CHECK(r->last_same_host_bytes() == 0);
    REQUIRE(r->swap().value() == 1);
    CHECK(same(r->current_bytes(), w1));

    // A peer on node-1 holds version 2: read from it at once, every byte.
    auto peer = s.reader("rollout-peer", "node-1");
    s.publish(2, w2);
    REQUIRE(peer->pull(2).is_ok());
    REQUIRE(peer->swap().is_ok());
    REQUIRE(s.loop->run_until([&] { return peer->serving(); }, Millis(5000)));
    REQUIRE(names(s.plan_holders(2, "node-1"), "rollout-peer"));
    t0 = core::Clock::now();
    auto second = pull_latest();
    REQUIRE_MESSAGE(second.is_ok(), second.status().to_string());
    CHECK(*second == 2);
    CHECK(core::Clock::now() - t0 < wait);
    CHECK(r->last_same_host_bytes() == w2.size());
    REQUIRE(r->swap().value() == 2);
    CHECK(same(r->current_bytes(), w2));
    CHECK(peer->close().is_ok());
    CHECK(r->close().is_ok());
  }

  TEST_CASE("after a swap the old copy is withdrawn and freed only once its readers are done") {
    Setup s;
    auto w1 = weights(1, 2u << 20), w2 = weights(2, 2u << 20);
    s.publish(1, w1);
    auto a = s.reader("rollout-a", "node-1");
    REQUIRE(a->pull(1).is_ok());
    REQUIRE(a->swap().is_ok());
    REQUIRE(s.loop->run_until([&] { return a->serving(); }, Millis(5000)));

    // A slow peer holds a lease on version 1 from A (as a pull in progress would).
    auto lease = s.client->plan("policy", 1, {"node-1", "", ""});
    REQUIRE(lease.is_ok());
    REQUIRE(lease->holders.size() == 2);
    REQUIRE(lease->holders[0].holder_id == "rollout-a");

    s.publish(2, w2);
    REQUIRE(a->pull(2).is_ok());
    REQUIRE(a->swap().value() == 2);
    REQUIRE(s.loop->run_until([&] { return a->serving(); }, Millis(5000)));
    // The store no longer sends readers of 1 to A, and sends readers of 2 there.
    auto ids1 = s.plan_holders(1, "node-1");
    CHECK(!ids1.empty());
    CHECK(!names(ids1, "rollout-a"));
    CHECK(names(s.plan_holders(2, "node-1"), "rollout-a"));
    // Still leased: A keeps the memory of 1, and the peer can finish reading it from A alone.
    s.loop->run_until([] { return false; }, Millis(500));
    CHECK(a->retiring() == 1);
    auto desc = core::RegionDescriptor::decode(lease->holders[0].descriptor);
    REQUIRE(desc.is_ok());
    auto chunks = core::whole_region_chunks(lease->manifest.layout());
    auto buf = s.engine->allocate(w1.size(), false).value();
    auto st = s.engine->read_sync({{"rollout-a", *desc}}, chunks, *buf, {});
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(same({buf->data(), buf->size()}, w1));
    CHECK(a->retiring() == 1);
    // The lease ends: the copy drains and A frees it.
    REQUIRE(s.client->release(lease->lease_id).is_ok());
    CHECK(s.loop->run_until([&] { return a->retiring() == 0; }, Millis(5000)));
    CHECK(a->current_version() == 2);
    CHECK(same(a->current_bytes(), w2));
    CHECK(a->close().is_ok());
  }

  TEST_CASE("a version that was never committed fails with a clear error, not a hang") {
    Setup s;
    auto w1 = weights(1, 256 * 1024);
    s.publish(1, w1);
    auto r = s.reader("rollout-0", "node-1");
    auto t0 = core::Clock::now();

    // No such version at all.
    auto missing = r->pull(7);
    CHECK(missing.status().code() == core::Code::kNotFound);
    CHECK_MESSAGE(missing.status().message().find("policy@7") != std::string::npos,
                  missing.status().to_string());

    // A manifest the store knows, but no holder has all of it: not committed.
    auto w5 = weights(5, 256 * 1024);
    auto m5 = core::make_manifest("policy", 5, {{"t", "U8", {w5.size()}, 0, w5.size()}}, w5.data(),
                                  w5.size(), kChunk);
    REQUIRE(m5.is_ok());
    REQUIRE(s.client->put_manifest(*m5).is_ok());
    auto uncommitted = r->pull(5);
    CHECK(uncommitted.status().code() == core::Code::kFailedPrecondition);
    CHECK_MESSAGE(uncommitted.status().message().find("not committed") != std::string::npos,
                  uncommitted.status().to_string());
    // latest is still 1: pull_latest stages 1, never 5.
    std::optional<core::Result<std::uint64_t>> done;
    r->pull_latest([&](core::Result<std::uint64_t> v) { done.emplace(std::move(v)); });
    REQUIRE(s.loop->run_until([&] { return done.has_value(); }, Millis(10000)));
    CHECK(done->value() == 1);

    // A model with nothing committed: both calls say so.
    weightstore::ReaderOptions ro;
    ro.model = "other";
    ro.serve = false;
    auto other = weightstore::Reader::create(*s.loop, *s.engine, *s.client, ro).value();
    CHECK(other->pull().status().code() == core::Code::kNotFound);
    done.reset();
    other->pull_latest([&](core::Result<std::uint64_t> v) { done.emplace(std::move(v)); });
    REQUIRE(s.loop->run_until([&] { return done.has_value(); }, Millis(10000)));
    CHECK(done->status().code() == core::Code::kNotFound);
    CHECK(other->staged_version() == 0);
    CHECK(core::Clock::now() - t0 < std::chrono::seconds(10));  // answered, not timed out

    // A version larger than the reader's limit is refused before anything is allocated; what
    // it holds stays as it was.
    weightstore::ReaderOptions small;
    small.model = "policy";
    small.serve = false;
    small.read.max_total_bytes = w1.size() - 1;
    auto capped = weightstore::Reader::create(*s.loop, *s.engine, *s.client, small).value();
    auto refused = capped->pull(1);
    CHECK(refused.status().code() == core::Code::kInvalidArgument);
    CHECK_MESSAGE(refused.status().message().find("limit") != std::string::npos,
                  refused.status().to_string());
    CHECK(capped->staged_version() == 0);
    CHECK(capped->current_version() == 0);

    // Options that cannot work are refused up front.
    weightstore::ReaderOptions bad;
    bad.model = "policy";  // serves, but has no holder id
    CHECK(weightstore::Reader::create(*s.loop, *s.engine, *s.client, bad).status().code() ==
          core::Code::kInvalidArgument);
    CHECK(r->close().is_ok());
  }
}
