// The weight store as a real process (`sluice weightstore`), spoken to over ZeroMQ.
#include <doctest/doctest.h>

#include <csignal>

#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "format/shard.hpp"
#include "weightstore/protocol.hpp"
#include "weightstore/service.hpp"
#include "wire/messaging.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Code;
using core::Message;
using core::Millis;

namespace {

struct StoreProcess {
  std::unique_ptr<core::Subprocess> proc;
  std::string endpoint;
  explicit StoreProcess(const std::string& listen) {
    proc = core::Subprocess::spawn_argv({SLUICE_BIN, "--log-level", "warn", "weightstore", "--set",
                                         "store.listen=" + listen, "--set",
                                         "store.security.mode=plain"})
               .value();
    while (true) {
      auto line = proc->read_line(Millis(20000));
      REQUIRE_MESSAGE(line.is_ok(), line.status().to_string());
      if (line->rfind("endpoint ", 0) == 0) {
        endpoint = line->substr(9);
        break;
      }
    }
  }
};

core::Manifest manifest(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(4096, static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {1024}, 0, 4096};
  return core::make_manifest("policy", version, {t}, bytes.data(), bytes.size(), 1024).value();
}

HolderRegistration reg(const std::string& id, std::uint64_t version,
                       std::vector<bool> chunks = {}) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "tcp://127.0.0.1:9/" + id;
  r.descriptor = "descriptor of " + id;
  r.topology = {"host-" + id, "rack-1", "dc-1"};
  r.manifest = manifest(version);
  r.chunks = std::move(chunks);
  return r;
}

core::Result<Message> call(core::Client& c, Message m) {
  return c.call(std::move(m), Millis(5000));
}

Message latest_req() {
  Message m("store.latest");
  m.body["model"] = "policy";
  return m;
}

}  // namespace

TEST_SUITE("weightstore.service") {
  TEST_CASE("a manifest past the configured size, tensor or chunk limits is refused when decoded") {
    core::Manifest m = manifest(1);  // 4096 bytes, 1 tensor, 4 chunks
    Message put = encode(PutManifest{m});
    StoreDecodeLimits lim;
    CHECK(decode_put_manifest(put, lim).is_ok());
    lim.max_version_bytes = m.total_bytes - 1;
    CHECK(decode_put_manifest(put, lim).status().message().find("max_version_bytes") !=
          std::string::npos);
    lim = {};
    lim.max_chunks = m.chunk_count() - 1;
    CHECK(decode_put_manifest(put, lim).status().message().find("max_chunks") != std::string::npos);
    // A registration carries a manifest too.
    lim = {};
    lim.max_version_bytes = 1;
    CHECK_FALSE(decode_registration(encode(reg("relay-1", 1)), lim).is_ok());
    // A long tensor list is refused by its length, before its entries are read.
    lim = {};
    Message many("store.put_manifest");
    many.body["manifest"] = m.to_json();
    many.body["manifest"]["tensors"] = nlohmann::json::array();
    for (std::size_t i = 0; i <= lim.max_tensors; ++i)
      many.body["manifest"]["tensors"].push_back(nullptr);
    auto r = decode_put_manifest(many, lim);
    REQUIRE_FALSE(r.is_ok());
    CHECK_MESSAGE(r.status().message().find("more than") != std::string::npos,
                  r.status().to_string());
  }

  TEST_CASE("a request that fails validation gets an error and leaves the store unchanged") {
    auto loop = core::EventLoop::create().value();
    ServiceConfig cfg;
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security.mode = "plain";
    auto svc = StoreService::create(*loop, cfg).value();
    auto c = core::Client::create(*loop, svc->endpoint(), core::Security::plain()).value();
    // Some state first: a committed version, a partial holder, a lease.
    REQUIRE(call(*c, encode(reg("actor", 2))).is_ok());
    REQUIRE(call(*c, encode(reg("relay-1", 2, {true, false, false, false}))).is_ok());
    Message plan("store.plan");
    plan.body = {{"model", "policy"}, {"version", 2}, {"topology", nlohmann::json::object()}};
    REQUIRE(call(*c, plan).is_ok());
    const std::string before = svc->store().state_digest();

    std::vector<Message> bad;
    Message m("store.register");
    m.body = {{"endpoint", "tcp://x"}};  // no holder_id, no manifest
    bad.push_back(m);
    Message wrong_chunks = encode(reg("relay-2", 2, {true, true}));  // 2 of 4 chunks
    bad.push_back(wrong_chunks);
    m = Message("store.add_chunks");
    m.body = {{"holder_id", "relay-1"}, {"model", "policy"}, {"version", 2}, {"chunks", {1, 99}}};
    bad.push_back(m);  // chunk 99 does not exist (and chunk 1 must not be set either)
    m.body = {{"holder_id", "nobody"}, {"model", "policy"}, {"version", 2}, {"chunks", {1}}};
    bad.push_back(m);
    // 2^32 + 1 is not chunk 1 (a 32-bit cast would have made it one).
    m.body = {{"holder_id", "relay-1"},
              {"model", "policy"},
              {"version", 2},
              {"chunks", {std::uint64_t{1} << 32 | 1}}};
    bad.push_back(m);
    m.body = {{"holder_id", std::string(300, 'x')}, {"model", "policy"}, {"version", 2}};
    m.type = "store.drained";
    bad.push_back(m);  // an id longer than any holder's
    m = Message("store.chain_source");
    m.body = {{"model", "policy"}, {"version", 2}, {"relay_id", "relay-1"}, {"exclude", {1, 2}}};
    bad.push_back(m);
    m = Message("store.unpublish");
    m.body = {{"holder_id", "relay-1"}, {"model", "policy"}, {"version", 7}};
    bad.push_back(m);
    m = Message("store.plan");
    m.body = {{"model", "policy"}, {"version", "two"}};
    bad.push_back(m);
    m = Message("store.put_manifest");
    m.body = {{"manifest", manifest(1).to_json()}};  // below the committed one
    bad.push_back(m);
    m = Message("store.renew");
    m.body = {{"lease_id", 424242}};
    bad.push_back(m);
    bad.push_back(Message("store.no_such_request"));
    nlohmann::json deep = 1;
    for (int i = 0; i < 500; ++i)
      deep = nlohmann::json::array({deep});
    m = Message("store.register");
    m.body = {{"holder_id", deep}};
    bad.push_back(m);

    for (const auto& req : bad) {
      CAPTURE(req.type);
      CAPTURE(req.body.dump().substr(0, 200));
      auto r = call(*c, req);
      CHECK_FALSE(r.is_ok());
      CHECK(svc->store().state_digest() == before);
    }
    // A valid request still changes it: the digest is not blind.
    m = Message("store.add_chunks");
    m.body = {{"holder_id", "relay-1"}, {"model", "policy"}, {"version", 2}, {"chunks", {1}}};
    REQUIRE(call(*c, m).is_ok());
    CHECK(svc->store().state_digest() != before);
  }

  TEST_CASE("publish, commit, latest and a ranked read plan through a store process") {
    StoreProcess store("tcp://127.0.0.1:*");
    auto loop = core::EventLoop::create().value();
    auto c = core::Client::create(*loop, store.endpoint, core::Security::plain()).value();

    Message put("store.put_manifest");
    put.body["manifest"] = manifest(1).to_json();
    REQUIRE(call(*c, put).is_ok());
    CHECK(call(*c, latest_req()).status().code() == Code::kNotFound);

    auto partial = call(*c, encode(reg("relay-1", 1, {true, true, false, false})));
    REQUIRE(partial.is_ok());
    CHECK(partial->body["committed"] == false);
    Message plan_req("store.plan");
    plan_req.body["model"] = "policy";
    plan_req.body["version"] = 1;
    CHECK(call(*c, plan_req).status().code() == Code::kFailedPrecondition);

    Message add("store.add_chunks");
    add.body = {{"holder_id", "relay-1"}, {"model", "policy"}, {"version", 1}, {"chunks", {2, 3}}};
    auto added = call(*c, add);
    REQUIRE(added.is_ok());
    CHECK(added->body["committed"] == true);
    auto latest = call(*c, latest_req());
    REQUIRE(latest.is_ok());
    CHECK(latest->body["version"] == 1);

    REQUIRE(call(*c, encode(reg("relay-2", 1))).is_ok());
    plan_req.body["version"] = 0;
    plan_req.body["topology"] = {
        {"host", "host-relay-2"}, {"rack", "rack-1"}, {"datacenter", "dc-1"}};
    auto plan_msg = call(*c, plan_req);
    REQUIRE(plan_msg.is_ok());
    auto plan = decode_plan(*plan_msg);
    REQUIRE_MESSAGE(plan.is_ok(), plan.status().to_string());
    CHECK(plan->manifest.version == 1);
    REQUIRE(plan->chunks.size() == 4);
    CHECK(plan->holders[plan->chunks[0].holders[0]].holder_id == "relay-2");  // same host first
    CHECK(plan->holders[plan->chunks[0].holders[0]].descriptor == "descriptor of relay-2");

    // A bad request changes nothing and says what is wrong.
    Message bad("store.register");
    bad.body["holder_id"] = "x";
    bad.body["endpoint"] = "tcp://127.0.0.1:9";
    bad.blobs.push_back("d");
    auto r = call(*c, bad);
    CHECK(r.status().code() == Code::kProtocol);  // malformed: the one code of every decoder
    CHECK(r.status().message().find("'manifest' is missing") != std::string::npos);
    Message older("store.put_manifest");
    older.body["manifest"] = manifest(1).to_json();
    older.body["manifest"]["tensors"][0]["bytes"] = 4000;
    auto o = call(*c, older);
    CHECK(o.status().code() == Code::kProtocol);
    CHECK(o.status().message().find("has 4000 bytes") != std::string::npos);
  }

  TEST_CASE("a host share is registered only as its parent version declares it") {
    StoreProcess store("tcp://127.0.0.1:*");
    auto loop = core::EventLoop::create().value();
    auto c = core::Client::create(*loop, store.endpoint, core::Security::plain()).value();
    // policy@1 of one [64, 16] F32 tensor, rows of tp 2 declared.
    std::vector<std::uint8_t> bytes(4096);
    for (std::size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<std::uint8_t>(i * 7);
    core::TensorSpec t{"w", "F32", {64, 16}, 0, 4096};
    auto m = core::make_manifest("policy", 1, {t}, bytes.data(), bytes.size(), 1024).value();
    core::ShardLayout l;
    l.tp_size = 2;
    l.splits = {{"w", core::Split::kRows}};
    REQUIRE(core::add_shard_checksums(m, l, bytes.data()).is_ok());
    const std::string name = core::share_model("policy", 2, 1, "r");
    const auto share = core::share_manifest(m, name).value();
    auto share_reg = [&](core::Manifest sm) {
      HolderRegistration r;
      r.holder_id = "relay-1";
      r.endpoint = "relay:relay-1";
      r.descriptor = "d";
      r.manifest = std::move(sm);
      r.chunks = {false, false};
      return encode(r);
    };
    // Before the store knows the parent version, a share of it cannot be checked: refused.
    CHECK(call(*c, share_reg(share)).status().code() == Code::kFailedPrecondition);
    Message put("store.put_manifest");
    put.body["manifest"] = m.to_json();
    REQUIRE(call(*c, put).is_ok());
    // A share manifest with other checksums (another relay's bytes) is not the declared one.
    core::Manifest forged = share;
    forged.checksums[0] ^= 1;
    auto f = call(*c, share_reg(forged));
    CHECK(f.status().code() == Code::kInvalidArgument);
    CHECK(f.status().message().find("not the share") != std::string::npos);
    auto ok = call(*c, share_reg(share));
    CHECK_MESSAGE(ok.is_ok(), ok.status().to_string());
    // Nobody publishes a share as a version of its own.
    Message put_share("store.put_manifest");
    put_share.body["manifest"] = share.to_json();
    CHECK(call(*c, put_share).status().code() == Code::kInvalidArgument);
  }

  TEST_CASE("a killed store restarts and rebuilds holders and latest from re-registrations") {
    std::string endpoint;
    {
      StoreProcess first("tcp://127.0.0.1:*");
      endpoint = first.endpoint;
      auto loop = core::EventLoop::create().value();
      auto c = core::Client::create(*loop, endpoint, core::Security::plain()).value();
      REQUIRE(call(*c, encode(reg("relay-1", 3))).is_ok());
      REQUIRE(call(*c, encode(reg("relay-1", 4))).is_ok());
      CHECK(call(*c, latest_req())->body["version"] == 4);
      REQUIRE(first.proc->signal(SIGKILL).is_ok());
      REQUIRE(first.proc->wait(Millis(10000)).is_ok());
    }
    StoreProcess second(endpoint);  // same port
    auto loop = core::EventLoop::create().value();
    auto c = core::Client::create(*loop, endpoint, core::Security::plain()).value();
    CHECK(call(*c, latest_req()).status().code() == Code::kNotFound);
    // The holder's heartbeat tells it to register again; it does, with what it holds.
    Message hb("store.heartbeat");
    hb.body["holder_id"] = "relay-1";
    CHECK(call(*c, hb).status().code() == Code::kNotFound);
    REQUIRE(call(*c, encode(reg("relay-1", 4))).is_ok());
    REQUIRE(call(*c, encode(reg("relay-1", 3))).is_ok());
    auto latest = call(*c, latest_req());
    REQUIRE(latest.is_ok());
    CHECK(latest->body["version"] == 4);
    CHECK(call(*c, hb).is_ok());
  }
}
