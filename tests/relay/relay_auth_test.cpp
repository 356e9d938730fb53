// A relay talks only to the store whose public key the job's members file names: an impostor
// store at the configured endpoint, with another key, gets nothing from it (no join, no request
// for a plan), even one that would admit the relay's key.
#include <doctest/doctest.h>

#include "../support/job_keys.hpp"
#include "core/event_loop.hpp"
#include "relay/relay.hpp"
#include "wire/messaging.hpp"

using namespace sluice;
using core::Message;
using core::Millis;
using testing::JobKeys;

namespace {

// Runs a relay of the job against `store` for `ms` and returns the messages the store saw.
std::uint64_t messages_seen_by(const JobKeys& keys, const core::Security& store_security, int ms) {
  auto loop = core::EventLoop::create().value();
  auto store = core::Server::create(*loop, "tcp://127.0.0.1:*", store_security).value();
  std::uint64_t handled = 0;
  for (const char* type : {"store.join_relay", "store.latest", "store.heartbeat"}) {
    store->on_sync(type, [&handled](const Message& m) -> core::Result<Message> {
      ++handled;
      return core::not_found(m.type + ": nothing here");
    });
  }
  relay::RelayConfig rc;
  rc.store = store->endpoint();
  rc.relay_id = "relay-0";
  rc.poll_ms = 20;
  rc.security = keys.config("relay-0");
  auto r = relay::Relay::create(*loop, rc, {});
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  auto stop = loop->after(Millis(ms), [&] { (*r)->stop(); });
  (*r)->run().ignore();
  const auto& st = store->stats();
  return handled + st.requests + st.oneway + st.rejected;
}

}  // namespace

TEST_SUITE("relay.auth") {
  TEST_CASE("a relay refuses an impostor store whose key is not the job's") {
    JobKeys keys;
    JobKeys other;
    // The genuine store's key: the relay talks to it (what makes the next check meaningful).
    CHECK(messages_seen_by(keys, keys.security("weightstore"), 1000) > 0);
    // An impostor at the same kind of endpoint with another key, admitting the job's members.
    core::Security impostor = other.security("weightstore");
    impostor.members = keys.security("weightstore").members;
    CHECK(messages_seen_by(keys, impostor, 1500) == 0);
  }

  TEST_CASE("in curve mode a relay's id is its key's identity: another is refused at start") {
    JobKeys keys;
    auto loop = core::EventLoop::create().value();
    relay::RelayConfig rc;
    rc.store = "tcp://127.0.0.1:1";
    rc.relay_id = "relay-9";  // the store takes the id from the key: every join would be refused
    rc.security = keys.config("relay-0");
    auto r = relay::Relay::create(*loop, rc, {});
    CHECK(r.status().code() == core::Code::kInvalidArgument);
    CHECK(r.status().message().find("set relay.relay_id=relay-0") != std::string::npos);
  }
}
