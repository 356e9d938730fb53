// Long polls (weightstore/waiters.hpp): the store holds a question for the latest version, or
// for a relay's source, until it has news, answers at the end of the wait otherwise, and answers
// at once past its caps.
#include <doctest/doctest.h>

#include <optional>

#include "core/event_loop.hpp"
#include "format/manifest.hpp"
#include "weightstore/client.hpp"
#include "weightstore/service.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Clock;
using core::Millis;

namespace {

// Four chunks of 512 bytes, each version its own bytes.
core::Manifest four_chunks(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(2048, static_cast<std::uint8_t>(version * 7));
  core::TensorSpec t{"w", "U8", {2048}, 0, 2048};
  return core::make_manifest("policy", version, {t}, bytes.data(), bytes.size(), 512).value();
}

struct Store {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<StoreService> service;
  std::unique_ptr<StoreClient> client;

  Store() {
    ServiceConfig cfg;
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security.mode = "plain";
    service = StoreService::create(*loop, cfg).value();
    client = StoreClient::create(*loop, service->endpoint(), core::Security::plain(), Millis(2000))
                 .value();
  }

  // Registers `holder` for `version` with the chunks given (all of them when empty).
  void hold(const std::string& holder, std::uint64_t version, std::vector<bool> chunks = {}) {
    auto ok = client->register_holder({.holder_id = holder,
                                       .endpoint = "tcp://127.0.0.1:9",
                                       .descriptor = "-",
                                       .topology = {"host-" + holder, "rack-1", "dc-1"},
                                       .manifest = four_chunks(version),
                                       .chunks = std::move(chunks)});
    REQUIRE_MESSAGE(ok.is_ok(), ok.status().to_string());
  }
};

template <typename T>
struct Answer {
  std::optional<core::Result<T>> reply;
  Clock::time_point at{};
  auto done() {
    return [this](core::Result<T> r) {
      reply = std::move(r);
      at = Clock::now();
    };
  }
};

}  // namespace

TEST_SUITE("weightstore.long_poll") {
  TEST_CASE("a question for the latest version waits for a newer one to commit") {
    Store s;
    s.hold("actor", 1);
    Answer<Latest> a;
    s.client->latest_async(LatestRequest{"policy", 1, 10000}, Millis(0), a.done());
    s.loop->run_until([&] { return a.reply.has_value(); }, Millis(400));
    CHECK_FALSE(a.reply.has_value());  // version 1 is not news to a caller that holds it

    const auto committed = Clock::now();
    s.hold("actor", 2);
    REQUIRE(s.loop->run_until([&] { return a.reply.has_value(); }, Millis(5000)));
    REQUIRE_MESSAGE(a.reply->is_ok(), a.reply->status().to_string());
    CHECK((*a.reply)->version == 2);
    CHECK(a.at - committed < Millis(5000));  // at the commit, not at the end of the wait

    // A caller behind the latest is answered at once.
    Answer<Latest> behind;
    s.client->latest_async(LatestRequest{"policy", 1, 10000}, Millis(0), behind.done());
    REQUIRE(s.loop->run_until([&] { return behind.reply.has_value(); }, Millis(2000)));
    CHECK((*behind.reply)->version == 2);
  }

  TEST_CASE("a question with no news is answered when its wait ends, with what there is") {
    Store s;
    Answer<Latest> none;
    auto asked = Clock::now();
    s.client->latest_async(LatestRequest{"policy", 0, 300}, Millis(0), none.done());
    REQUIRE(s.loop->run_until([&] { return none.reply.has_value(); }, Millis(5000)));
    CHECK(none.at - asked >= Millis(290));
    CHECK(none.reply->status().code() == core::Code::kNotFound);  // no version at all

    s.hold("actor", 3);
    Answer<Latest> same;
    asked = Clock::now();
    s.client->latest_async(LatestRequest{"policy", 3, 300}, Millis(0), same.done());
    REQUIRE(s.loop->run_until([&] { return same.reply.has_value(); }, Millis(5000)));
    CHECK(same.at - asked >= Millis(290));
    REQUIRE(same.reply->is_ok());
    CHECK((*same.reply)->version == 3);
  }

  TEST_CASE("a caller past its cap of waiting questions is answered at once") {
    Store s;
    s.hold("actor", 1);
    const std::size_t cap = WaitLimits{}.per_identity;
    std::vector<Answer<Latest>> answers(cap + 1);
    for (auto& a : answers)
      s.client->latest_async(LatestRequest{"policy", 1, 10000}, Millis(0), a.done());
    auto answered = [&] {
      std::size_t n = 0;
      for (const auto& a : answers)
        n += a.reply.has_value() ? 1 : 0;
      return n;
    };
    REQUIRE(s.loop->run_until([&] { return answered() == 1; }, Millis(3000)));
    s.loop->run_until([] { return false; }, Millis(200));
    CHECK(answered() == 1);  // the others still wait
    CHECK(s.service->parked() == cap);
    CHECK((*answers.back().reply)->version == 1);
  }

  TEST_CASE("a relay's question for its source waits until the source holds more") {
    Store s;
    REQUIRE(s.client->put_manifest(four_chunks(1)).is_ok());
    REQUIRE(s.client->join_relay(JoinRelay{"relay-a", {"host-a", "rack-1", "dc-1"}}).is_ok());
    REQUIRE(s.client->join_relay(JoinRelay{"relay-b", {"host-b", "rack-1", "dc-1"}}).is_ok());
    s.hold("relay-a", 1, {true, false, false, false});

    ChainSourceRequest ask;
    ask.model = "policy";
    ask.version = 1;
    ask.relay_id = "relay-b";
    ask.wait_ms = 10000;
    Answer<ChainSource> first;
    s.client->chain_source_async(ask, Millis(0), first.done());
    REQUIRE(s.loop->run_until([&] { return first.reply.has_value(); }, Millis(3000)));
    REQUIRE_MESSAGE(first.reply->is_ok(), first.reply->status().to_string());
    CHECK((*first.reply)->holder_id == "relay-a");  // a source is news: answered at once

    ask.following = "relay-a";
    ask.after_chunks = 1;
    Answer<ChainSource> more;
    s.client->chain_source_async(ask, Millis(0), more.done());
    s.loop->run_until([&] { return more.reply.has_value(); }, Millis(400));
    CHECK_FALSE(more.reply.has_value());

    AddChunks add{"relay-a", "policy", 1, {1, 2}};
    Answer<Committed> added;
    s.client->add_chunks_async(add, Millis(0), added.done());
    REQUIRE(s.loop->run_until([&] { return more.reply.has_value(); }, Millis(5000)));
    REQUIRE_MESSAGE(more.reply->is_ok(), more.reply->status().to_string());
    CHECK((*more.reply)->holder_id == "relay-a");
    CHECK((*more.reply)->chunks == std::vector<bool>{true, true, true, false});
  }
}
