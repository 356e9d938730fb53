// Host-share relays as real processes over TCP, on emulated hosts (network namespaces, when
// root) and on loopback with host labels. Two rollouts of tensor-parallel size 4 run on
// two hosts each (2 GPUs a host), so a host's GPUs load rank h of tp 2 between them: each host's
// relay holds only that share, the relays of one share form a chain, and every rank reads its
// shard from its own host's relay, bit for bit the slice of the whole version.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <map>

#include "../support/job_keys.hpp"
#include "../support/jobs.hpp"
#include "../support/store_process.hpp"
#include "actor/publisher.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "format/shard.hpp"
#include "launch/emulated_hosts.hpp"
#include "relay/relay.hpp"
#include "weightstore/reader.hpp"

using namespace sluice;
using core::Millis;

namespace {

constexpr std::uint64_t kChunk = 64 * 1024;

struct Tensor {
  std::string name;
  std::uint64_t rows, cols;
  core::Split split;
};
// F32: column-parallel (rows), row-parallel (columns) and replicated tensors.
const std::vector<Tensor> kTensors = {
    {"embed", 1024, 256, core::Split::kRows},
    {"wo", 256, 256, core::Split::kColumns},
    {"norm", 1, 256, core::Split::kReplicated},
    {"head", 1024, 256, core::Split::kColumns},
};

core::ShardLayout layout(std::uint32_t rank, std::uint32_t tp) {
  core::ShardLayout l;
  l.tp_rank = rank;
  l.tp_size = tp;
  for (const auto& t : kTensors)
    if (t.split != core::Split::kReplicated) l.splits[t.name] = t.split;
  return l;
}

std::unique_ptr<core::Subprocess> start(std::vector<std::string> args, const char* ready,
                                        std::string* rest = nullptr) {
  core::Subprocess::Options o;
  o.argv = std::move(args);
  o.extra_env = {"UCX_TLS=tcp,self"};
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

core::TransferOptions over_tcp() {
  core::TransferOptions o;
  o.ucx_config = {{"TLS", "tcp,self"}};
  return o;
}

// Rank r's part of tensor t, cut element by element from the whole version.
std::vector<std::uint8_t> reference(const std::uint8_t* base, const Tensor& t, std::uint32_t r,
                                    std::uint32_t tp) {
  std::uint64_t r0 = 0, r1 = t.rows, c0 = 0, c1 = t.cols;
  if (t.split == core::Split::kRows) r0 = r * t.rows / tp, r1 = (r + 1) * t.rows / tp;
  if (t.split == core::Split::kColumns) c0 = r * t.cols / tp, c1 = (r + 1) * t.cols / tp;
  std::vector<std::uint8_t> out;
  for (std::uint64_t i = r0; i < r1; ++i)
    out.insert(out.end(), base + (i * t.cols + c0) * 4, base + (i * t.cols + c1) * 4);
  return out;
}

// The run: hosts a0, a1 (rollout a) and b0, b1 (rollout b), a relay on each (host x1 holds share
// rank 1 of tp 2), the store and the publisher apart. With `net`, each on an emulated host of its
// own (network namespaces, links limited); without, labelled hosts on loopback. With `curve`,
// every role authenticates with the job's keys and versions are signed, as in a default job: the
// shares, which no actor signs, are trusted as the signed version's shares.
std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<std::string> b);

void run_shares(cli::EmulatedHosts* net, bool curve) {
  std::unique_ptr<testing::JobKeys> keys;
  if (curve) {
    keys = std::make_unique<testing::JobKeys>(
        std::vector<std::pair<std::string, std::string>>{{"weightstore", core::kRoleWeightstore},
                                                         {"actor", core::kRoleActor},
                                                         {"relay-a0", core::kRoleRelay},
                                                         {"relay-a1", core::kRoleRelay},
                                                         {"relay-b0", core::kRoleRelay},
                                                         {"relay-b1", core::kRoleRelay},
                                                         {"rollout-0", core::kRoleRollout}});
  }
  // A role's --set security arguments under `section`.
  auto security_args = [&](const std::string& section, const std::string& identity) {
    if (!keys) return std::vector<std::string>{"--set", section + ".security.mode=plain"};
    const core::SecurityConfig c = keys->config(identity);
    return std::vector<std::string>{"--set", section + ".security.key_file=" + c.key_file, "--set",
                                    section + ".security.members_file=" + c.members_file};
  };
  auto security_of = [&](const std::string& identity) {
    return keys ? keys->security(identity) : core::Security::plain();
  };
  std::string store_ep;
  if (net) REQUIRE(net->enter(0).is_ok());  // the store and the publisher: host 0
  const std::string listen = net ? cli::EmulatedHosts::address(0) : std::string("127.0.0.1");
  std::vector<std::string> store_argv = {SLUICE_BIN, "--log-level",
                                         "warn",     "weightstore",
                                         "--set",    "store.listen=tcp://" + listen + ":*"};
  for (const auto& a : security_args("store", "weightstore"))
    store_argv.push_back(a);
  auto store = start(store_argv, "endpoint ", &store_ep);
  // Hosts a0, a1 (rollout a) and b0, b1 (rollout b); host x1 holds share rank 1 of tp 2.
  const std::vector<std::string> hosts = {"a0", "a1", "b0", "b1"};
  std::map<std::string, std::unique_ptr<core::Subprocess>> relays;
  auto loop = core::EventLoop::create().value();
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string& h = hosts[i];
    std::vector<std::string> argv;
    if (net) argv = net->exec_prefix(static_cast<std::uint32_t>(i + 1));
    for (std::string a : {std::string(SLUICE_BIN), std::string("--log-level"), std::string("warn"),
                          std::string("relay")})
      argv.push_back(a);
    argv =
        with(argv, {"--set", "relay.store=" + store_ep, "--set", "relay.relay_id=relay-" + h,
                    "--set", "relay.poll_ms=20", "--set", "relay.host=" + h, "--set",
                    "relay.share_tp_size=2", "--set", std::string("relay.share_rank=") + h.back()});
    for (const auto& a : security_args("relay", "relay-" + h))
      argv.push_back(a);
    relays[h] = start(argv, "relay ");
    loop->run_until([] { return false; }, Millis(100));  // join in this order
  }
  core::TransferOptions publisher_to = over_tcp();
  publisher_to.stream_reach = store_ep;  // its chunk server binds where the hosts reach it
  auto engine = core::TransferEngine::create(*loop, publisher_to).value();
  auto client = weightstore::StoreClient::create(*loop, store_ep, security_of("actor")).value();
  actor::PublisherOptions po;
  po.model = "policy";
  po.holder_id = "actor-0";
  po.chunk_bytes = kChunk;
  po.topology.host = "trainer";
  po.shard_layouts = {layout(0, 4), layout(0, 2)};  // the rollouts', the hosts'
  auto pub = actor::Publisher::create(*loop, *engine, *client, po).value();
  auto beat = loop->every(Millis(300), [&] { pub->heartbeat(); });

  std::map<std::string, std::uint64_t> at;
  std::uint64_t total = 0;
  for (const auto& t : kTensors) {
    at[t.name] = total;
    total += t.rows * t.cols * 4;
  }
  std::vector<std::uint8_t> w(total);
  core::fill_pseudo_random(w.data(), w.size(), 41);
  std::vector<actor::TensorView> views;
  for (const auto& t : kTensors) {
    std::vector<std::uint64_t> shape = t.rows == 1 ? std::vector<std::uint64_t>{t.cols}
                                                   : std::vector<std::uint64_t>{t.rows, t.cols};
    views.push_back({t.name, "F32", shape, w.data() + at[t.name], t.rows * t.cols * 4});
  }
  auto m = pub->publish(1, views);
  REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
  CHECK(m->signature.empty() == !curve);
  CHECK_FALSE(m->digests.empty());

  // Each relay holds its share whole: the share's chunks, and no copy of the version.
  std::map<std::uint32_t, core::Manifest> share;
  for (std::uint32_t r : {0u, 1u}) {
    const std::string splits = core::plan_shard(*m, layout(r, 2)).value().splits;
    share[r] = core::share_manifest(*m, core::share_model("policy", 2, r, splits)).value();
  }
  auto held = [&](const std::string& h) -> std::uint64_t {
    auto cp = client->copies(share[h.back() - '0'].model, 1);
    if (!cp.is_ok()) return 0;
    for (const auto& [id, n] : *cp)
      if (id == "relay-" + h) return n;
    return 0;
  };
  CHECK(loop->run_until(
      [&] {
        for (const auto& h : hosts)
          if (held(h) != share[h.back() - '0'].chunk_count()) return false;
        return true;
      },
      Millis(30000)));
  for (const auto& h : hosts) {
    CAPTURE(h);
    const core::Manifest& s = share[h.back() - '0'];
    // The host's share: half of each split tensor and the replicated one, within a chunk of
    // half the version.
    const std::uint64_t replicated = 256 * 4;
    CHECK(s.total_bytes == (total - replicated) / 2 + replicated);
    CHECK(s.total_bytes <= total / 2 + kChunk);
    CHECK(relays[h]->running());
  }
  auto whole = client->copies("policy", 1).value();
  CHECK(whole.size() == 1);  // the publisher's alone
  CHECK(whole.count("actor-0") == 1);

  // Every rank, on its host, reads its shard from that host's relay.
  std::vector<std::unique_ptr<core::TransferEngine>> engines;
  std::vector<std::unique_ptr<weightstore::StoreClient>> clients;
  std::vector<std::unique_ptr<weightstore::Reader>> readers;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    const std::string& h = hosts[i];
    // A reader's sockets live in the namespace its thread is in when they are made.
    if (net) REQUIRE(net->enter(static_cast<std::uint32_t>(i + 1)).is_ok());
    for (std::uint32_t g = 0; g < 2; ++g) {
      const std::uint32_t rank = 2 * static_cast<std::uint32_t>(h.back() - '0') + g;
      CAPTURE(h);
      CAPTURE(rank);
      engines.push_back(core::TransferEngine::create(*loop, over_tcp()).value());
      weightstore::ReaderOptions ro;
      ro.model = "policy";
      ro.holder_id = "rollout-" + h + "-" + std::to_string(g);
      ro.topology.host = h;
      ro.serve = false;  // a shard reader holds only its shard
      ro.layout = layout(rank, 4);
      ro.layout->host_tp_size = 2;
      clients.push_back(
          weightstore::StoreClient::create(*loop, store_ep, security_of("rollout-0")).value());
      auto reader = weightstore::Reader::create(*loop, *engines.back(), *clients.back(), ro);
      REQUIRE_MESSAGE(reader.is_ok(), reader.status().to_string());
      readers.push_back(std::move(reader).value());
      auto& rd = *readers.back();
      auto pulled = rd.pull(1);
      REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
      REQUIRE(rd.swap().value() == 1);
      std::uint64_t shard_bytes = 0;
      for (const auto& t : kTensors) {
        auto got = rd.current_tensor(t.name);
        REQUIRE_MESSAGE(got.is_ok(), got.status().to_string());
        const auto want = reference(w.data() + at[t.name], t, rank, 4);
        CHECK(got->size() == want.size());
        CHECK(std::memcmp(got->data(), want.data(), want.size()) == 0);
        shard_bytes += want.size();
      }
      // Every byte came from the host's relay, none from the publisher.
      CHECK(rd.last_stats().bytes == shard_bytes);
      CHECK(rd.last_same_host_bytes() == shard_bytes);
    }
  }

  // Version 2, asked for at once on the last host of its share's chain, before its relay has
  // started on it: the reader waits for its own host's relay, follows it, and gets exactly its
  // slice from it alone.
  core::fill_pseudo_random(w.data(), w.size(), 42);
  REQUIRE(pub->publish(2, views).is_ok());
  auto& last = *readers.back();  // host b1, rank 3
  auto pulled = last.pull(2);
  REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
  REQUIRE(last.swap().value() == 2);
  std::uint64_t shard_bytes = 0;
  for (const auto& t : kTensors) {
    auto got = last.current_tensor(t.name);
    REQUIRE(got.is_ok());
    const auto want = reference(w.data() + at[t.name], t, 3, 4);
    CHECK(std::memcmp(got->data(), want.data(), want.size()) == 0);
    shard_bytes += want.size();
  }
  CHECK(last.last_same_host_bytes() == shard_bytes);
  if (net) REQUIRE(net->enter(0).is_ok());
}

std::vector<std::string> with(std::vector<std::string> a, std::initializer_list<std::string> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_SUITE("relay.share") {
  TEST_CASE("a relay's share settings are checked before it starts") {
    relay::RelayConfig c;
    c.share_tp_size = 4;
    c.share_rank = 3;
    CHECK(c.validate().is_ok());
    c.share_rank = 4;
    CHECK(c.validate().code() == core::Code::kInvalidArgument);
    CHECK(c.validate().message().find("share_rank 4") != std::string::npos);
    c.share_rank = 0;
    c.make_deltas = true;
    CHECK(c.validate().code() == core::Code::kInvalidArgument);
    c.make_deltas = false;
    c.share_tp_size = core::kMaxTensorParallel + 1;
    CHECK(c.validate().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("host-share relays hold their host's share and serve every rank its exact shard") {
    run_shares(nullptr, false);
  }

  TEST_CASE("host-share relays under curve: shares trusted as the signed version's, read on-host") {
    run_shares(nullptr, true);
  }

  TEST_CASE("host-share relays on emulated hosts: each holds its share, every rank its shard") {
    if (!testing::can_emulate_hosts()) {
      MESSAGE("skipped: needs root and network namespaces");
      return;
    }
    cli::EmulatedHostsConfig hc;
    hc.count = 4;
    hc.link_rate = "1gbit";
    hc.prefix = "srs" + std::to_string(::getpid());
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      env.emplace_back(*e);
    auto net = cli::EmulatedHosts::up(hc, env);
    REQUIRE_MESSAGE(net.is_ok(), net.status().to_string());
    run_shares(net->get(), true);
  }
}
