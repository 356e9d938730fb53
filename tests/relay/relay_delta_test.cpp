// Relays and deltas, as real processes: a relay in another datacenter than its source receives
// each next version as a delta and ends bit for bit equal to the version; a delta that rebuilds
// wrong chunks, or one that is not a delta at all, falls back to full reads and still ends bit
// for bit equal; the deltas a relay offers go with retention. And a relay whose only source
// serves wrong bytes holds one version at a time rather than one per version published.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actor/publisher.hpp"
#include "core/checksum.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "format/delta.hpp"
#include "relay/relay_delta.hpp"
#include "weightstore/client.hpp"
#include "weightstore/service.hpp"

using namespace sluice;
using core::Millis;

namespace {

std::unique_ptr<core::Subprocess> start(std::vector<std::string> args, const char* ready,
                                        std::string* rest = nullptr,
                                        const std::string& stderr_path = {}) {
  core::Subprocess::Options o;
  o.argv = std::move(args);
  o.stderr_path = stderr_path;
  auto p = core::Subprocess::spawn(std::move(o)).value();
  while (true) {
    auto line = p->read_line(Millis(20000));
    REQUIRE_MESSAGE(line.is_ok(), line.status().to_string());
    if (line->rfind(ready, 0) == 0) {
      if (rest) *rest = line->substr(std::strlen(ready));
      return p;
    }
  }
}

std::unique_ptr<core::Subprocess> start_store(std::string& endpoint) {
  return start(
      {SLUICE_BIN, "--log-level", "warn", "weightstore", "--set", "store.listen=tcp://127.0.0.1:*",
       "--set", "store.security.mode=plain", "--set", "store.holder_ttl_ms=5000"},
      "endpoint ", &endpoint);
}

std::unique_ptr<core::Subprocess> start_relay(const std::string& store, const std::string& id,
                                              const std::string& dc, bool make,
                                              const std::string& log,
                                              std::vector<std::string> extra = {}) {
  std::vector<std::string> args{
      SLUICE_BIN, "--log-level", "info", "relay", "--set", "relay.store=" + store, "--set",
      "relay.relay_id=" + id, "--set", "relay.security.mode=plain", "--set", "relay.poll_ms=20",
      "--set", "relay.host=host-" + id, "--set", "relay.datacenter=" + dc, "--set",
      std::string("relay.make_deltas=") + (make ? "true" : "false"),
      // A loaded machine may take seconds to make a delta: wait for it here rather than fall
      // back to a full read, which is not what these tests look at.
      "--set", "relay.delta_wait_ms=30000"};
  args.insert(args.end(), extra.begin(), extra.end());
  return start(std::move(args), "relay ", nullptr, log);
}

std::string temp_log(const std::string& name) {
  std::string p =
      (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".log"))
          .string();
  std::filesystem::remove(p);
  return p;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

std::size_t chunks_of(weightstore::StoreClient& c, std::uint64_t version, const std::string& id) {
  auto r = c.copies("policy", version);
  if (!r.is_ok()) return 0;
  auto it = r->find(id);
  return it == r->end() ? 0 : it->second;
}

// The version's bytes as relay `id` alone serves them.
std::vector<std::uint8_t> read_from(core::EventLoop& loop, core::TransferEngine& engine,
                                    weightstore::StoreClient& store, std::uint64_t version,
                                    const std::string& id) {
  std::optional<core::Result<weightstore::Pulled>> got;
  weightstore::pull_async(
      engine, store, "policy", version, {}, {},
      [&](core::Result<weightstore::Pulled> r) { got = std::move(r); },
      [&](weightstore::ReadPlan& p) {
        for (std::uint32_t i = 0; i < p.holders.size(); ++i) {
          if (p.holders[i].holder_id != id) continue;
          for (auto& c : p.chunks)
            c.holders = {i};
          return true;
        }
        return false;
      });
  REQUIRE(loop.run_until([&] { return got.has_value(); }, Millis(30000)));
  REQUIRE_MESSAGE(got->is_ok(), got->status().to_string());
  const auto& b = (*got)->buffer;
  return {b->data(), b->data() + (*got)->manifest.total_bytes};
}

struct Job {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<core::TransferEngine> engine;
  std::unique_ptr<weightstore::StoreClient> client;
  std::unique_ptr<actor::Publisher> pub;
  std::unique_ptr<core::EventLoop::Timer> beat;

  explicit Job(const std::string& store_ep) {
    engine = core::TransferEngine::create(*loop, {}).value();
    client = weightstore::StoreClient::create(*loop, store_ep, core::Security::plain()).value();
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-0";
    po.chunk_bytes = 256 * 1024;
    po.topology = {"host-actor", "", "dc-a"};
    pub = actor::Publisher::create(*loop, *engine, *client, po).value();
    beat = loop->every(Millis(300), [this] { pub->heartbeat(); });
  }
  core::Manifest publish(std::uint64_t v, const std::vector<std::uint8_t>& w) {
    auto m = pub->publish(v, {{"w", "F32", {w.size() / 4}, w.data(), w.size()}});
    REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
    return *m;
  }
  void wait_complete(std::uint64_t v, const core::Manifest& m, const std::string& id) {
    CHECK_MESSAGE(loop->run_until([&] { return chunks_of(*client, v, id) == m.chunk_count(); },
                                  Millis(30000)),
                  id << " never held version " << v);
  }
};

std::vector<std::uint8_t> next_version(std::vector<std::uint8_t> w, std::uint64_t seed) {
  core::optimizer_step_fp32(w, 0.03, seed);
  return w;
}

}  // namespace

TEST_SUITE("relay") {
  TEST_CASE("a delta read stops when its lease is not renewed") {
    auto loop = core::EventLoop::create().value();
    weightstore::ServiceConfig cfg;
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security.mode = "plain";
    cfg.lease_ttl_ms = 300;  // gone long before the first renewal (kLeaseRenewPeriod)
    cfg.expire_interval_ms = 100;
    cfg.holder_ttl_ms = 60000;
    auto svc = weightstore::StoreService::create(*loop, cfg).value();
    auto client =
        weightstore::StoreClient::create(*loop, svc->endpoint(), core::Security::plain()).value();
    auto engine = core::TransferEngine::create(*loop, {}).value();
    const std::uint64_t bytes = 1 << 20;
    std::vector<std::uint8_t> w1(bytes, 1), w2(bytes, 2);
    core::TensorSpec t{"w", "F32", {bytes / 4}, 0, bytes};
    auto m1 = core::make_manifest("policy", 1, {t}, w1.data(), bytes, 256 * 1024).value();
    auto m2 = core::make_manifest("policy", 2, {t}, w2.data(), bytes, 256 * 1024).value();
    for (const core::Manifest* m : {&m1, &m2}) {
      weightstore::HolderRegistration r;
      r.holder_id = "actor-0";
      r.endpoint = "tcp://127.0.0.1:9";
      r.descriptor = "not read here";
      r.manifest = *m;
      REQUIRE(client->register_holder(r).is_ok());
    }
    // The delta's holder: a chunk server that takes connections and never answers, so the read
    // would wait for its GET timeout (kRelayGetTimeout) but for the failed renewal.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    core::RegionDescriptor d;
    d.worker_address = "not used: chunk streams only";
    d.rkey = "not used";
    d.host = "another-host";
    d.length = 4096;
    d.stream = {"127.0.0.1:" + std::to_string(ntohs(a.sin_port))};
    d.stream_token = std::string(core::kStreamTokenBytes, 't');
    weightstore::DeltaRegistration dr;
    dr.holder_id = "relay-9";
    dr.endpoint = "tcp://127.0.0.1:9";
    dr.descriptor = d.encode();
    dr.delta = {"policy", 1, 2, 4096, 4096, {7}};
    std::optional<core::Status> offered;
    client->register_delta_async(dr, Millis(5000), [&](core::Status s) { offered = s; });
    REQUIRE(loop->run_until([&] { return offered.has_value(); }, Millis(10000)));
    REQUIRE_MESSAGE(offered->is_ok(), offered->to_string());

    auto dst = engine->allocate(bytes, false).value();
    std::vector<bool> have(m2.chunk_count(), false);
    std::optional<core::Result<relay::DeltaFetched>> got;
    relay::fetch_delta(*engine, *client, "policy", 1, m2, {}, w1.data(), *dst, have,
                       [&](core::Result<relay::DeltaFetched> r) { got = std::move(r); });
    REQUIRE(loop->run_until([&] { return got.has_value(); }, Millis(30000)));
    ::close(fd);
    REQUIRE_FALSE(got->is_ok());
    CHECK_MESSAGE(got->status().message().find("not renewed") != std::string::npos,
                  got->status().to_string());
    CHECK(std::none_of(have.begin(), have.end(), [](bool b) { return b; }));
  }

  TEST_CASE("a relay in another datacenter receives each next version by delta, bit for bit") {
    std::string store_ep;
    auto store = start_store(store_ep);
    const std::string log_a = temp_log("relay-a"), log_b = temp_log("relay-b");
    auto relay_a = start_relay(store_ep, "relay-a", "dc-a", true, log_a);
    Job job(store_ep);
    job.loop->run_until([] { return false; }, Millis(150));  // relay-a joins first
    auto relay_b = start_relay(store_ep, "relay-b", "dc-b", false, log_b);

    std::vector<std::vector<std::uint8_t>> w(5);
    w[1].resize(16u << 20);
    core::fill_weights_fp32(w[1], 1);
    for (std::uint64_t v = 2; v <= 4; ++v)
      w[v] = next_version(w[v - 1], v);

    for (std::uint64_t v = 1; v <= 4; ++v) {
      auto m = job.publish(v, w[v]);
      job.wait_complete(v, m, "relay-a");
      job.wait_complete(v, m, "relay-b");
      // Read back from relay-b alone: the version, bit for bit.
      auto got = read_from(*job.loop, *job.engine, *job.client, v, "relay-b");
      CHECK_MESSAGE(got == w[v], "relay-b's copy of version " << v << " differs");
      if (v == 2) {
        // relay-a offers the delta 1->2, a fraction of the version.
        auto d = job.client->deltas("policy").value();
        REQUIRE(d.size() == 1);
        CHECK(d[0].holder_id == "relay-a");
        CHECK(d[0].base == 1);
        CHECK(d[0].target == 2);
        CHECK(d[0].bytes * 10 < w[2].size());
      }
    }
    // Versions 2, 3 and 4 came by delta, each rebuilt whole.
    const std::string text = read_text(log_b);
    CHECK_MESSAGE(count(text, "by delta from") == 3, text);
    CHECK(count(text, "0 mismatched") == 3);
    // Retention: only the delta between the two retained versions is still offered.
    CHECK(job.loop->run_until(
        [&] {
          auto d = job.client->deltas("policy");
          return d.is_ok() && d->size() == 1 && (*d)[0].base == 3 && (*d)[0].target == 4;
        },
        Millis(10000)));
    // relay-a dropped the delta 1->2 with version 1, and the store forgot it once it drained.
    bool forgotten = false;
    for (int i = 0; i < 50 && !forgotten; ++i) {
      std::optional<core::Status> st;
      job.client->delta_drained_async(
          {"relay-a", "policy", 1, 2}, Millis(1000),
          [&](core::Result<weightstore::Drained> r) { st = r.status(); });
      job.loop->run_until([&] { return st.has_value(); }, Millis(2000));
      forgotten = st && st->code() == core::Code::kNotFound;
      if (!forgotten) job.loop->run_until([] { return false; }, Millis(200));
    }
    CHECK(forgotten);
    CHECK(relay_a->running());
    CHECK(relay_b->running());
    std::filesystem::remove(log_a);
    std::filesystem::remove(log_b);
  }

  TEST_CASE("a delta that rebuilds wrong chunks, or is no delta, falls back to full reads") {
    std::string store_ep;
    auto store = start_store(store_ep);
    const std::string log_b = temp_log("relay-b-fallback");
    auto relay_b = start_relay(store_ep, "relay-b", "dc-b", false, log_b);
    Job job(store_ep);
    std::vector<std::vector<std::uint8_t>> w(4);
    w[1].resize(8u << 20);
    core::fill_weights_fp32(w[1], 5);
    w[2] = next_version(w[1], 6);
    w[3] = next_version(w[2], 7);
    auto m1 = job.publish(1, w[1]);
    job.wait_complete(1, m1, "relay-b");

    // A delta maker in the publisher's datacenter that holds version 1: relay-b waits for its
    // deltas. Its deltas are the ones this test injects. It joined after relay-b, so it is the
    // seed of the publisher's datacenter and relay-b (dc-b's seed) reads from it, as a real
    // maker would, which offers N -> N+1 once it holds N+1: so it holds each target first.
    auto v1 = job.engine->allocate(w[1].size(), false).value();
    std::memcpy(v1->data(), w[1].data(), w[1].size());
    REQUIRE(job.client->join_relay({"maker", {"host-maker", "", "dc-a"}, true, {}}).is_ok());
    weightstore::HolderRegistration hr;
    hr.holder_id = "maker";
    hr.endpoint = "maker";
    hr.descriptor = v1->descriptor().encode();
    hr.topology = {"host-maker", "", "dc-a"};
    hr.manifest = m1;
    REQUIRE(job.client->register_holder(hr).is_ok());
    auto maker_beat = job.loop->every(Millis(300), [&] {
      job.client->heartbeat_async("maker", Millis(1000), [](core::Status) {});
    });
    std::vector<std::unique_ptr<core::RegisteredBuffer>> offered;
    auto offer = [&](std::uint64_t base, std::uint64_t target, std::vector<std::uint8_t> blob) {
      auto mem = job.engine->allocate(blob.size(), false).value();
      std::memcpy(mem->data(), blob.data(), blob.size());
      weightstore::DeltaRegistration r;
      r.holder_id = "maker";
      r.endpoint = "maker";
      r.descriptor = mem->descriptor().encode();
      r.topology = {"host-maker", "", "dc-a"};
      r.delta = {"policy", base, target, blob.size(), 256 * 1024, {}};
      for (std::uint64_t at = 0; at < blob.size(); at += 256 * 1024) {
        r.delta.checksums.push_back(core::chunk_checksum(
            mem->data() + at, std::min<std::uint64_t>(256 * 1024, blob.size() - at)));
      }
      // The store may not know the target yet (publish() returns once the bytes are staged).
      core::Status st;
      job.loop->run_until([&] { return (st = job.client->register_delta(r)).is_ok(); },
                          Millis(5000));
      REQUIRE_MESSAGE(st.is_ok(), st.to_string());
      offered.push_back(std::move(mem));
    };

    // Version 2: a well-formed delta made against a target with three chunks altered.
    auto wrong = w[2];
    for (std::size_t chunk : {1, 7, 20})
      wrong[chunk * 256 * 1024 + 100] ^= 0x40;
    auto m2 = job.publish(2, w[2]);
    auto v2 = job.engine->allocate(w[2].size(), false).value();
    std::memcpy(v2->data(), w[2].data(), w[2].size());
    hr.descriptor = v2->descriptor().encode();
    hr.manifest = m2;
    REQUIRE(job.client->register_holder(hr).is_ok());
    offer(1, 2, core::encode_delta(w[1], wrong, 1, 2, 256 * 1024).value());
    job.wait_complete(2, m2, "relay-b");
    CHECK(read_from(*job.loop, *job.engine, *job.client, 2, "relay-b") == w[2]);

    // Version 3: bytes that are no delta at all (their own checksums are right).
    std::vector<std::uint8_t> junk(100000);
    core::fill_pseudo_random(junk.data(), junk.size(), 3);
    auto m3 = job.publish(3, w[3]);
    auto v3 = job.engine->allocate(w[3].size(), false).value();
    std::memcpy(v3->data(), w[3].data(), w[3].size());
    hr.descriptor = v3->descriptor().encode();
    hr.manifest = m3;
    REQUIRE(job.client->register_holder(hr).is_ok());
    offer(2, 3, junk);
    job.wait_complete(3, m3, "relay-b");
    CHECK(read_from(*job.loop, *job.engine, *job.client, 3, "relay-b") == w[3]);

    const std::string text = read_text(log_b);
    CHECK_MESSAGE(count(text, "3 mismatched (read in full)") == 1, text);
    CHECK_MESSAGE(count(text, "delta 2->3: protocol error") == 1, text);
    CHECK(relay_b->running());
    std::filesystem::remove(log_b);
  }

  TEST_CASE("a relay whose only source serves wrong bytes holds one version at a time") {
    std::string store_ep;
    auto store = start_store(store_ep);
    const std::string log_b = temp_log("relay-b-bound");
    auto relay_b = start_relay(store_ep, "relay-b", "dc-a", false, log_b,
                               {"--set", "relay.abandon_after_ms=1500"});
    Job job(store_ep);
    // "liar" says it holds versions 1 to 6 whole; its memory holds zeros, so every chunk fails
    // relay-b's checksum and relay-b has no source for them.
    std::vector<std::uint8_t> w(1u << 20);
    core::fill_weights_fp32(w, 9);
    auto zeros = job.engine->allocate(w.size(), false).value();
    std::memset(zeros->data(), 0, w.size());
    weightstore::HolderRegistration hr;
    hr.holder_id = "liar";
    hr.endpoint = "liar";
    hr.descriptor = zeros->descriptor().encode();
    hr.topology = {"host-liar", "", "dc-a"};
    auto liar_beat = job.loop->every(Millis(300), [&] {
      job.client->heartbeat_async("liar", Millis(1000), [](core::Status) {});
    });
    // The versions relay-b takes, as the store sees it: copies it receives or holds, not those
    // it gave up (unpublished, freed once drained).
    auto relay_b_versions = [&](std::uint64_t upto) {
      std::size_t n = 0;
      for (std::uint64_t v = 1; v <= upto; ++v) {
        auto r = job.client->holders("policy", v);
        if (!r.is_ok()) continue;
        for (const auto& h : *r)
          n += h.holder_id == "relay-b" && !h.unpublished;
      }
      return n;
    };
    std::size_t most = 0;
    for (std::uint64_t v = 1; v <= 6; ++v) {
      hr.manifest = core::make_manifest("policy", v, {{"w", "F32", {w.size() / 4}, 0, w.size()}},
                                        w.data(), w.size(), 256 * 1024)
                        .value();
      REQUIRE(job.client->register_holder(hr).is_ok());
      for (int i = 0; i < 8; ++i) {
        job.loop->run_until([] { return false; }, Millis(100));
        most = std::max(most, relay_b_versions(v));
      }
    }
    // Without the bound relay-b took a copy of every version it saw (1.5-2 GB per relay in the
    // elastic bench); with it, the one it receives (two while one is given up for the next).
    CHECK_MESSAGE(most >= 1, "relay-b never started a version");
    CHECK_MESSAGE(most <= 2, "relay-b held " << most << " incomplete versions at once");
    // A good version: relay-b gives up the one it is stuck on and takes it, bit for bit.
    auto m7 = job.publish(7, w);
    job.wait_complete(7, m7, "relay-b");
    CHECK(read_from(*job.loop, *job.engine, *job.client, 7, "relay-b") == w);
    const std::string text = read_text(log_b);
    CHECK_MESSAGE(count(text, "gives up on policy@") >= 1, text);
    CHECK(relay_b->running());
    std::filesystem::remove(log_b);
  }
}
