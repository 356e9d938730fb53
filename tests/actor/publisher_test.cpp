// The publisher against a real store process, read back through pull(): bytes equal, `latest`
// monotonic, a copy under lease is not freed until the lease ends, and a version a relay holds
// is handed off to it (the publisher no longer serves it) while, with no relay, it stays.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <map>
#include <optional>

#include "../support/holders.hpp"
#include "../support/store_process.hpp"
#include "../support/test_weights.hpp"
#include "actor/publisher.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "weightstore/protocol.hpp"

using namespace sluice;
using core::Millis;

namespace {

using Store = testing::StoreProcess;

using testing::holders;
using testing::views;
using testing::weights;

// A store process, and a publisher of "policy" (64 KiB chunks, two versions kept) talking to it.
struct Setup {
  Store store;
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<core::TransferEngine> engine = core::TransferEngine::create(*loop, {}).value();
  std::unique_ptr<weightstore::StoreClient> client =
      weightstore::StoreClient::create(*loop, store.endpoint, core::Security::plain()).value();
  std::unique_ptr<actor::Publisher> pub = make_publisher();

  std::unique_ptr<actor::Publisher> make_publisher(bool handoff = true) {
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-0";
    po.chunk_bytes = 64 * 1024;
    po.keep_versions = 2;
    po.handoff = handoff;
    return actor::Publisher::create(*loop, *engine, *client, po).value();
  }
};

// A relay process (`sluice relay`) on the store, started once it says it runs.
std::unique_ptr<core::Subprocess> start_relay(const std::string& store, const std::string& id) {
  auto p = core::Subprocess::spawn_argv({SLUICE_BIN, "--log-level", "warn", "relay", "--set",
                                         "relay.store=" + store, "--set", "relay.relay_id=" + id,
                                         "--set", "relay.security.mode=plain", "--set",
                                         "relay.poll_ms=20"})
               .value();
  while (true) {
    auto line = p->read_line(Millis(20000));
    REQUIRE_MESSAGE(line.is_ok(), line.status().to_string());
    if (line->rfind("relay ", 0) == 0) return p;
  }
}

std::vector<std::string> plan_holders(weightstore::StoreClient& c, std::uint64_t version) {
  auto plan = c.plan("policy", version, {});
  REQUIRE_MESSAGE(plan.is_ok(), plan.status().to_string());
  std::vector<std::string> ids;
  for (const auto& h : plan->holders)
    ids.push_back(h.holder_id);
  REQUIRE(c.release(plan->lease_id).is_ok());
  return ids;
}

}  // namespace

TEST_SUITE("actor.publisher") {
  TEST_CASE("a publish that timed out keeps its memory until the store says its readers drained") {
    // A store that takes the registration (so it may name the copy to readers) but is slow to
    // answer it: the publish times out with its copy possibly already served.
    auto loop = core::EventLoop::create().value();
    auto engine = core::TransferEngine::create(*loop, {}).value();
    auto server = core::Server::create(*loop, "tcp://127.0.0.1:*", core::Security::plain()).value();
    int registered = 0, unpublished = 0;
    bool drained = false;
    std::vector<core::Responder> unanswered;
    server->on("store.put_manifest", [](const core::Message&, core::Responder r) {
      r.respond(weightstore::encode_ok());
    });
    server->on("store.register", [&](const core::Message&, core::Responder r) {
      ++registered;
      unanswered.push_back(r);
    });
    server->on("store.unpublish", [&](const core::Message&, core::Responder r) {
      ++unpublished;
      r.respond(weightstore::encode(weightstore::Drained{false}));
    });
    server->on("store.drained", [&](const core::Message&, core::Responder r) {
      r.respond(weightstore::encode(weightstore::Drained{drained}));
    });
    auto client =
        weightstore::StoreClient::create(*loop, server->endpoint(), core::Security::plain())
            .value();
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-0";
    po.chunk_bytes = 64 * 1024;
    po.publish_timeout = Millis(1000);
    auto pub = actor::Publisher::create(*loop, *engine, *client, po).value();
    auto w1 = weights(1, 256 * 1024);
    auto r = pub->publish(1, views(w1));
    CHECK(r.status().code() == core::Code::kTimeout);
    CHECK(registered == 1);
    // Withdrawn like any served copy, and kept while the store says readers may still read it.
    CHECK(loop->run_until([&] { return unpublished == 1; }, Millis(3000)));
    loop->run_until([] { return false; }, Millis(600));
    CHECK(pub->retiring() == 1);
    drained = true;
    CHECK(loop->run_until([&] { return pub->retiring() == 0; }, Millis(3000)));
    unanswered.clear();
  }

  TEST_CASE("published versions are pulled byte for byte and latest only moves forward") {
    Setup setup;
    auto& client = setup.client;
    auto& pub = setup.pub;

    std::uint64_t last_latest = 0;
    for (std::uint64_t v = 1; v <= 4; ++v) {
      auto w = weights(v, (1u << 20) + 4 * v);  // sizes differ from version to version
      auto m = pub->publish(v, views(w));
      REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
      auto latest = client->latest("policy");
      REQUIRE(latest.is_ok());
      CHECK(*latest >= last_latest);
      CHECK(*latest == v);
      last_latest = *latest;
      auto pulled = weightstore::pull(*setup.engine, *client, "policy", 0, {});
      REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
      CHECK(pulled->manifest.version == v);
      REQUIRE(pulled->manifest.total_bytes == w.size());
      CHECK(std::memcmp(pulled->buffer->data(), w.data(), w.size()) == 0);
      CHECK(pulled->manifest.tensors[1].name == "layer1.weight");
    }
    // A version is immutable: publishing other bytes as version 2 is refused, changing nothing.
    auto w = weights(2, 4096);
    CHECK(pub->publish(2, views(w)).status().code() == core::Code::kAlreadyExists);
    CHECK(client->latest("policy").value() == 4);
  }

  TEST_CASE("latest never goes backwards under concurrent publishes from two publishers") {
    Setup setup;
    auto& client = setup.client;
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-1";
    po.chunk_bytes = 64 * 1024;
    po.keep_versions = 8;
    auto other = actor::Publisher::create(*setup.loop, *setup.engine, *client, po).value();
    // Odd versions are large (their checksums take longer), even ones small: their manifests
    // reach the store out of version order. A version older than one the store already has is
    // refused (versions only increase); every other one commits; `latest` only moves forward.
    std::vector<std::vector<std::uint8_t>> ws;
    for (std::uint64_t v = 1; v <= 8; ++v)
      ws.push_back(weights(v, v % 2 ? (4u << 20) : 4096));
    std::uint64_t resolved = 0;
    std::vector<std::uint64_t> commits;
    for (std::uint64_t v = 1; v <= 8; ++v) {
      auto& pub = v % 2 ? setup.pub : other;
      REQUIRE(pub->publish_async(v, views(ws[v - 1]),
                                 [&, v](core::Result<core::Manifest> m) {
                                   ++resolved;
                                   if (m.is_ok()) {
                                     commits.push_back(v);
                                   } else {
                                     CHECK_MESSAGE(
                                         m.status().code() == core::Code::kFailedPrecondition,
                                         m.status().to_string());
                                   }
                                 })
                  .is_ok());
    }
    std::vector<std::uint64_t> seen;
    auto deadline = core::Clock::now() + Millis(30000);
    while (resolved < 8 && core::Clock::now() < deadline) {
      auto latest = client->latest("policy");  // runs the loop: the publishes progress meanwhile
      if (latest.is_ok()) seen.push_back(*latest);
    }
    REQUIRE(resolved == 8);
    seen.push_back(client->latest("policy").value());
    for (std::size_t i = 1; i < seen.size(); ++i)
      CHECK(seen[i] >= seen[i - 1]);
    CHECK(seen.back() == 8);
    REQUIRE(!commits.empty());
    CHECK(std::find(commits.begin(), commits.end(), 8u) != commits.end());
    // Each committed version reads back as its own bytes, whichever publisher holds it.
    for (std::uint64_t v : commits) {
      if (v < 7) continue;  // older ones may have left the retained set
      auto pulled = weightstore::pull(*setup.engine, *client, "policy", v, {});
      REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
      REQUIRE(pulled->manifest.total_bytes == ws[v - 1].size());
      CHECK(std::memcmp(pulled->buffer->data(), ws[v - 1].data(), ws[v - 1].size()) == 0);
    }
  }

  TEST_CASE("a copy under lease is not freed until its lease ends") {
    Setup setup;
    auto& loop = setup.loop;
    auto& client = setup.client;
    auto& pub = setup.pub;
    auto w1 = weights(1, 256 * 1024);
    REQUIRE(pub->publish(1, views(w1)).is_ok());
    // A reader holds a lease on version 1 (as a slow pull would).
    auto plan = client->plan("policy", 1, {});
    REQUIRE(plan.is_ok());
    auto w2 = weights(2, 256 * 1024), w3 = weights(3, 256 * 1024);
    REQUIRE(pub->publish(2, views(w2)).is_ok());
    REQUIRE(pub->publish(3, views(w3)).is_ok());  // version 1 leaves the kept two
    CHECK(pub->held().size() == 2);
    CHECK(pub->retiring() == 1);
    loop->run_until([] { return false; }, Millis(1000));
    CHECK(pub->retiring() == 1);  // still leased: its memory is still there
    // Version 1 is no longer offered to new readers.
    CHECK(client->plan("policy", 1, {}).status().code() == core::Code::kUnavailable);
    REQUIRE(client->release(plan->lease_id).is_ok());
    CHECK(loop->run_until([&] { return pub->retiring() == 0; }, Millis(5000)));
  }

  TEST_CASE("a reused buffer is served under a new stream token: the old descriptor is refused") {
    Setup setup;
    auto& loop = setup.loop;
    auto& client = setup.client;
    auto& pub = setup.pub;
    auto w1 = weights(1, 256 * 1024);
    REQUIRE(pub->publish(1, views(w1)).is_ok());
    // A reader's descriptor of version 1, kept past the version's life.
    auto plan = client->plan("policy", 1, {});
    REQUIRE(plan.is_ok());
    REQUIRE(plan->holders.size() == 1);
    auto old = core::RegionDescriptor::decode(plan->holders[0].descriptor);
    REQUIRE(old.is_ok());
    REQUIRE_FALSE(old->stream.empty());  // the engine serves a chunk stream
    REQUIRE(client->release(plan->lease_id).is_ok());
    // Versions 2 and 3 push version 1 out; once drained its buffer is free for reuse, and version
    // 4 (the same size) takes it.
    auto w2 = weights(2, 256 * 1024), w3 = weights(3, 256 * 1024), w4 = weights(4, 256 * 1024);
    REQUIRE(pub->publish(2, views(w2)).is_ok());
    REQUIRE(pub->publish(3, views(w3)).is_ok());
    REQUIRE(loop->run_until([&] { return pub->retiring() == 0; }, Millis(5000)));
    REQUIRE(pub->publish(4, views(w4)).is_ok());
    auto now = client->plan("policy", 4, {});
    REQUIRE(now.is_ok());
    auto fresh = core::RegionDescriptor::decode(now->holders[0].descriptor);
    REQUIRE(fresh.is_ok());
    REQUIRE(client->release(now->lease_id).is_ok());
    REQUIRE(fresh->base == old->base);  // the same memory
    CHECK(fresh->stream_token != old->stream_token);

    // The old token over the stream: refused, not version 4's bytes.
    auto stream = core::ChunkStream::connect(*loop, old->stream, old->stream_token, Millis(2000));
    REQUIRE(stream.is_ok());
    std::vector<std::uint8_t> got(4096, 0);
    std::optional<core::Status> done;
    (*stream)->get(0, got.size(), got.data(), [&](core::Status st) { done = st; });
    REQUIRE(loop->run_until([&] { return done.has_value(); }, Millis(5000)));
    CHECK(done->code() == core::Code::kNotFound);
    CHECK(std::memcmp(got.data(), w4.data(), got.size()) != 0);
  }

  TEST_CASE("close() withdraws every version and waits for its readers, within its bound") {
    Setup setup;
    auto& client = setup.client;
    auto& pub = setup.pub;
    auto w1 = weights(1, 256 * 1024), w2 = weights(2, 256 * 1024);
    REQUIRE(pub->publish(1, views(w1)).is_ok());
    REQUIRE(pub->publish(2, views(w2)).is_ok());
    // A reader is still on version 2 (as a rollout pulling the last version when the job ends).
    auto plan = client->plan("policy", 2, {});
    REQUIRE(plan.is_ok());
    core::Status closed = pub->close(Millis(600));
    CHECK(closed.code() == core::Code::kTimeout);
    CHECK(pub->held().empty());
    CHECK(pub->retiring() == 1);  // the leased copy's memory stays while the process does
    // Neither version is named to new readers any more: none would read a process that exited.
    CHECK(client->plan("policy", 1, {}).status().code() == core::Code::kUnavailable);
    CHECK(client->plan("policy", 2, {}).status().code() == core::Code::kUnavailable);
    // Once the reader is done, the store confirms the drain (ok, not a timeout) and the copy goes.
    REQUIRE(client->release(plan->lease_id).is_ok());
    CHECK(pub->close(Millis(5000)).is_ok());
    CHECK(pub->retiring() == 0);
  }

  TEST_CASE("a version a relay holds is handed off: the relay serves it, the publisher frees it") {
    Setup setup;
    auto& loop = setup.loop;
    auto& client = setup.client;
    auto& pub = setup.pub;
    auto relay = start_relay(setup.store.endpoint, "relay-a");
    loop->run_until([] { return false; }, Millis(300));  // the relay joins

    auto w1 = weights(1, (1u << 20) + 12);
    REQUIRE(pub->publish(1, views(w1)).is_ok());
    // A reader that got its plan before the hand-off holds a lease on the publisher's copy.
    auto early = client->plan("policy", 1, {});
    REQUIRE(early.is_ok());
    bool names_publisher = false;
    for (const auto& h : early->holders)
      names_publisher |= h.holder_id == "actor-0";
    REQUIRE(names_publisher);

    // Heartbeats (as the actor sends them) are where the publisher learns who else holds it.
    auto beat = loop->every(Millis(100), [&] { pub->heartbeat(); });
    REQUIRE(
        loop->run_until([&] { return holders(*client, 1)["relay-a"].complete; }, Millis(20000)));
    // The newest version stays with the publisher while only one relay holds it: were that relay
    // killed, nobody would hold it whole.
    loop->run_until([] { return false; }, Millis(1000));
    CHECK(pub->handed_off() == 0);
    CHECK(pub->held().size() == 1);

    // Once a newer version is out, the older one goes to the relay.
    auto w2 = weights(2, (1u << 20) + 12);
    REQUIRE(pub->publish(2, views(w2)).is_ok());
    REQUIRE(loop->run_until([&] { return pub->handed_off() == 1; }, Millis(20000)));
    REQUIRE(pub->held().size() == 1);
    CHECK(pub->held().front().manifest.version == 2);
    auto hs = holders(*client, 1);
    REQUIRE(hs.count("relay-a") == 1);
    CHECK(hs["relay-a"].complete);
    CHECK(hs["relay-a"].relay);
    CHECK(hs["actor-0"].unpublished);
    // Unpublished, but the early reader's lease keeps its memory until the lease ends.
    CHECK(pub->retiring() == 1);
    loop->run_until([] { return false; }, Millis(1000));
    CHECK(pub->retiring() == 1);
    REQUIRE(client->release(early->lease_id).is_ok());
    CHECK(loop->run_until([&] { return pub->retiring() == 0; }, Millis(5000)));

    // New readers of version 1 are sent to the relay alone and get the published bytes.
    CHECK(plan_holders(*client, 1) == std::vector<std::string>{"relay-a"});
    auto pulled = weightstore::pull(*setup.engine, *client, "policy", 1, {});
    REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
    REQUIRE(pulled->manifest.total_bytes == w1.size());
    CHECK(std::memcmp(pulled->buffer->data(), w1.data(), w1.size()) == 0);

    // The next version goes the same way once a third is out.
    auto w3 = weights(3, (1u << 20) + 12);
    REQUIRE(pub->publish(3, views(w3)).is_ok());
    REQUIRE(loop->run_until([&] { return pub->handed_off() == 2 && pub->retiring() == 0; },
                            Millis(20000)));
    CHECK(plan_holders(*client, 2) == std::vector<std::string>{"relay-a"});
    auto p2 = weightstore::pull(*setup.engine, *client, "policy", 2, {});
    REQUIRE_MESSAGE(p2.is_ok(), p2.status().to_string());
    REQUIRE(p2->manifest.total_bytes == w2.size());
    CHECK(std::memcmp(p2->buffer->data(), w2.data(), w2.size()) == 0);
    CHECK(relay->running());
    relay->signal(SIGTERM).ignore();
  }

  TEST_CASE("with no relay holding it, the publisher keeps serving its version") {
    Setup setup;
    auto& loop = setup.loop;
    auto& client = setup.client;
    auto& pub = setup.pub;
    auto beat = loop->every(Millis(100), [&] { pub->heartbeat(); });
    auto w1 = weights(1, 256 * 1024);  // 4 chunks
    auto m1 = pub->publish(1, views(w1));
    REQUIRE(m1.is_ok());

    // A relay holding part of it, and a complete holder that is not a relay (another publisher
    // of the same bytes), are not enough: neither takes the publisher's place.
    REQUIRE(client->join_relay({"relay-p", {}}).is_ok());
    weightstore::HolderRegistration partial;
    partial.holder_id = "relay-p";
    partial.endpoint = "relay:relay-p";
    partial.descriptor = "unused";
    partial.manifest = *m1;
    partial.chunks = {true, true, false, false};
    REQUIRE(client->register_holder(partial).is_ok());
    weightstore::HolderRegistration other = partial;
    other.holder_id = "actor-9";
    other.chunks.clear();  // all of it
    REQUIRE(client->register_holder(other).is_ok());
    auto hs = holders(*client, 1);
    REQUIRE(hs.size() == 3);
    CHECK(hs["actor-0"].complete);
    CHECK_FALSE(hs["actor-0"].relay);
    CHECK_FALSE(hs["relay-p"].complete);
    CHECK(hs["relay-p"].chunks == 2);
    CHECK(hs["relay-p"].relay);
    CHECK(hs["actor-9"].complete);
    CHECK_FALSE(hs["actor-9"].relay);

    loop->run_until([] { return false; }, Millis(1500));  // many heartbeats
    CHECK(pub->handed_off() == 0);
    REQUIRE(pub->held().size() == 1);
    CHECK(pub->held()[0].manifest.version == 1);
    CHECK(pub->retiring() == 0);
    CHECK_FALSE(holders(*client, 1)["actor-0"].unpublished);

    // Their descriptors are not real: withdraw them before reading.
    REQUIRE(client->unpublish("actor-9", "policy", 1).is_ok());
    REQUIRE(client->unpublish("relay-p", "policy", 1).is_ok());
    CHECK(plan_holders(*client, 1) == std::vector<std::string>{"actor-0"});
    auto pulled = weightstore::pull(*setup.engine, *client, "policy", 1, {});
    REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
    CHECK(std::memcmp(pulled->buffer->data(), w1.data(), w1.size()) == 0);
  }

  TEST_CASE("with hand-off turned off, the publisher keeps serving a version a relay holds") {
    Setup setup;
    auto& loop = setup.loop;
    auto& client = setup.client;
    auto pub = setup.make_publisher(false);
    setup.pub.reset();
    auto relay = start_relay(setup.store.endpoint, "relay-a");
    loop->run_until([] { return false; }, Millis(300));
    auto beat = loop->every(Millis(100), [&] { pub->heartbeat(); });
    auto w1 = weights(1, 256 * 1024);
    REQUIRE(pub->publish(1, views(w1)).is_ok());
    REQUIRE(
        loop->run_until([&] { return holders(*client, 1)["relay-a"].complete; }, Millis(20000)));
    loop->run_until([] { return false; }, Millis(1000));
    CHECK(pub->handed_off() == 0);
    CHECK(pub->held().size() == 1);
    CHECK_FALSE(holders(*client, 1)["actor-0"].unpublished);
    relay->signal(SIGTERM).ignore();
  }
}
