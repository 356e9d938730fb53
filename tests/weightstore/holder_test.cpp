// The holder lifecycle against a store service on the test's own loop, restarted in place: a
// retired copy's memory goes only when the store says its leases drained, or after a lease
// time-to-live of the store not knowing it, and a copy registered again after a restart waits
// out the leases the old store may have granted.
#include <doctest/doctest.h>

#include <numeric>

#include "weightstore/holder.hpp"
#include "weightstore/service.hpp"
#include "wire/transfer.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Millis;

namespace {

core::Manifest manifest(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(4096);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {1024}, 0, bytes.size()};
  return core::make_manifest("m", version, {t}, bytes.data(), bytes.size(), 1024).value();
}

core::TransferOptions same_host() {
  core::TransferOptions o;
  o.ucx_config = {{"TLS", "sm,self"}};
  return o;
}

struct Setup {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<core::TransferEngine> engine =
      core::TransferEngine::create(*loop, same_host()).value();
  ServiceConfig cfg;
  std::unique_ptr<StoreService> store;
  std::unique_ptr<StoreClient> client;
  std::vector<std::unique_ptr<core::RegisteredBuffer>> freed;
  std::unique_ptr<Holder> holder;

  explicit Setup(std::uint64_t store_lease_ttl_ms) {
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security.mode = "plain";
    cfg.lease_ttl_ms = store_lease_ttl_ms;
    cfg.expire_interval_ms = 50;
    store = StoreService::create(*loop, cfg).value();
    cfg.listen = store->endpoint();  // a restart binds the same address
    client = StoreClient::create(*loop, cfg.listen, core::Security::plain(), Millis(2000)).value();
    HolderOptions ho;
    ho.holder_id = "h";
    ho.drain_check = Millis(50);
    ho.lease_ttl = Millis(600);
    ho.request_timeout = Millis(2000);
    holder = Holder::create(*loop, *client, ho, [this](std::unique_ptr<core::RegisteredBuffer> b) {
               freed.push_back(std::move(b));
             }).value();
  }
  ~Setup() {
    holder.reset();
    freed.clear();
  }

  // Serves version `v` from a fresh buffer; returns the buffer (still the caller's).
  std::unique_ptr<core::RegisteredBuffer> serve(std::uint64_t v) {
    auto buf = engine->allocate(4096, false).value();
    holder->serve(manifest(v), buf->descriptor().encode());
    REQUIRE(loop->run_until([&] { return holder->registered(v); }, Millis(5000)));
    return buf;
  }

  void restart_store() {
    store.reset();
    // ZeroMQ closes the old socket in its own thread: the address may be busy for a moment.
    for (int attempt = 0; attempt < 100 && !store; ++attempt) {
      auto again = StoreService::create(*loop, cfg);
      if (again.is_ok()) {
        store = std::move(again).value();
      } else {
        loop->run_until([] { return false; }, Millis(20));
      }
    }
    REQUIRE(store);
  }

  bool freed_within(const core::RegisteredBuffer* b, Millis t) {
    return loop->run_until(
        [&] {
          for (const auto& f : freed)
            if (f.get() == b) return true;
          return false;
        },
        t);
  }
};

}  // namespace

TEST_SUITE("weightstore.holder") {
  TEST_CASE("a retired copy under lease is kept until the lease is released") {
    Setup s(60000);
    auto buf = s.serve(1);
    const core::RegisteredBuffer* p = buf.get();
    auto plan = s.client->plan("m", 1, {});  // a reader's lease on this holder's copy
    REQUIRE(plan.is_ok());
    s.holder->retire(1, std::move(buf));
    CHECK_FALSE(s.freed_within(p, Millis(400)));
    CHECK(s.holder->retiring() == 1);
    REQUIRE(s.client->release(plan->lease_id).is_ok());
    CHECK(s.freed_within(p, Millis(5000)));
    CHECK(s.holder->retiring() == 0);
    CHECK(s.holder->unconfirmed_frees() == 0);
  }

  TEST_CASE("a copy a restarted store does not know goes after a lease time-to-live, not before") {
    Setup s(60000);
    auto buf = s.serve(1);
    const core::RegisteredBuffer* p = buf.get();
    // A lease the old store granted dies with it: the new one can only say "unknown".
    REQUIRE(s.client->plan("m", 1, {}).is_ok());
    s.restart_store();
    s.holder->retire(1, std::move(buf));
    CHECK_FALSE(s.freed_within(p, Millis(300)));  // the holder's lease_ttl is 600 ms
    CHECK(s.holder->retiring() == 1);
    CHECK(s.freed_within(p, Millis(5000)));
    CHECK(s.holder->unconfirmed_frees() == 0);
  }

  TEST_CASE("a copy registered again after a restart does not drain for the store's lease ttl") {
    Setup s(1500);
    auto buf = s.serve(1);
    const core::RegisteredBuffer* p = buf.get();
    s.restart_store();
    // A heartbeat hears the store does not know this holder, and registers again. Sent from a
    // timer, as the roles do: the first one may be lost while the client reconnects.
    auto beats = s.loop->every(Millis(200), [&] { s.holder->heartbeat(); });
    REQUIRE(s.loop->run_until([&] { return s.store->store().holder_count() == 1; }, Millis(5000)));
    REQUIRE(s.loop->run_until([&] { return s.holder->registered(1); }, Millis(5000)));
    s.holder->retire(1, std::move(buf));
    // The store knows the copy now, but not the leases the old store may have granted on it.
    CHECK_FALSE(s.freed_within(p, Millis(700)));
    CHECK(s.freed_within(p, Millis(5000)));
  }

  TEST_CASE("close() keeps a copy that has not drained when there is no drain time-out") {
    Setup s(60000);
    auto buf = s.serve(1);
    const core::RegisteredBuffer* p = buf.get();
    auto plan = s.client->plan("m", 1, {});
    REQUIRE(plan.is_ok());
    s.holder->retire(1, std::move(buf));
    auto closed = s.holder->close(Millis(300));
    CHECK(closed.code() == core::Code::kTimeout);
    CHECK(s.holder->retiring() == 1);  // its memory stays while the process does
    REQUIRE(s.client->release(plan->lease_id).is_ok());
    CHECK(s.freed_within(p, Millis(5000)));
  }
}
