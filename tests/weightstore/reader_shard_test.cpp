// A rollout that declares its layout reads only its shard: against a real store process and a
// publisher that declares the job's layouts, every rank of tensor-parallel size 2 and 4 gets its
// tensors bit for bit equal to slicing the whole version, while the bytes it read (as the
// transfer engine counted them) are its shard's only, about 1/tp of the version plus the
// replicated tensors. An undeclared layout still gets verified bytes, by whole chunks. Bad
// layouts fail with a clear error, and nothing is loaded.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <optional>

#include "../support/store_process.hpp"
#include "actor/publisher.hpp"
#include "core/units.hpp"
#include "format/bf16.hpp"
#include "format/shard.hpp"
#include "weightstore/reader.hpp"
#include "weightstore/shard_read.hpp"

using namespace sluice;
using core::Millis;

namespace {

constexpr std::uint64_t kChunk = 16 * 1024;

// The trainer's version: a column-parallel embedding and q projection (rows), a row-parallel o
// projection and head (columns, the head in BF16), a replicated norm.
struct Tensor {
  std::string name, dtype;
  std::uint64_t rows, cols, elem;
  core::Split split;
};
const std::vector<Tensor> kTensors = {
    {"embed", "F32", 512, 64, 4, core::Split::kRows},
    {"wq", "F32", 64, 64, 4, core::Split::kRows},
    {"wo", "F32", 64, 64, 4, core::Split::kColumns},
    {"norm", "F32", 1, 64, 4, core::Split::kReplicated},
    {"head", "BF16", 512, 64, 2, core::Split::kColumns},
};

struct Version {
  std::vector<std::uint8_t> bytes;
  std::map<std::string, std::uint64_t> offset;
  std::vector<actor::TensorView> views() const {
    std::vector<actor::TensorView> v;
    for (const auto& t : kTensors) {
      std::vector<std::uint64_t> shape = t.name == "norm"
                                             ? std::vector<std::uint64_t>{t.cols}
                                             : std::vector<std::uint64_t>{t.rows, t.cols};
      v.push_back(
          {t.name, t.dtype, shape, bytes.data() + offset.at(t.name), t.rows * t.cols * t.elem});
    }
    return v;
  }
};

Version make_version(std::uint64_t seed) {
  Version v;
  std::uint64_t at = 0;
  for (const auto& t : kTensors) {
    v.offset[t.name] = at;
    at += t.rows * t.cols * t.elem;
  }
  v.bytes.resize(at);
  core::fill_pseudo_random(v.bytes.data(), v.bytes.size(), seed);
  return v;
}

// Rank r's part of tensor t of the whole version, cut element by element.
std::vector<std::uint8_t> reference(const Version& v, const Tensor& t, std::uint32_t r,
                                    std::uint32_t tp) {
  std::uint64_t r0 = 0, r1 = t.rows, c0 = 0, c1 = t.cols;
  if (t.split == core::Split::kRows) r0 = r * t.rows / tp, r1 = (r + 1) * t.rows / tp;
  if (t.split == core::Split::kColumns) c0 = r * t.cols / tp, c1 = (r + 1) * t.cols / tp;
  std::vector<std::uint8_t> out;
  const std::uint8_t* base = v.bytes.data() + v.offset.at(t.name);
  for (std::uint64_t i = r0; i < r1; ++i)
    for (std::uint64_t j = c0; j < c1; ++j)
      out.insert(out.end(), base + (i * t.cols + j) * t.elem, base + (i * t.cols + j + 1) * t.elem);
  return out;
}

core::ShardLayout layout(std::uint32_t rank, std::uint32_t tp) {
  core::ShardLayout l;
  l.tp_rank = rank;
  l.tp_size = tp;
  for (const auto& t : kTensors) {
    if (t.split != core::Split::kReplicated) l.splits[t.name] = t.split;
    l.names[t.name] = "model." + t.name + ".weight";
  }
  return l;
}

core::TransferOptions same_host() {
  core::TransferOptions o;
  o.ucx_config = {{"TLS", "sm,self"}};
  return o;
}

// A store process and a publisher that declares tp 2 and tp 4 of kTensors' splits.
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

  Setup() {
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "actor-0";
    po.chunk_bytes = kChunk;
    po.topology.host = "trainer";
    po.shard_layouts = {layout(0, 2), layout(0, 4)};
    pub = actor::Publisher::create(*loop, *engine, *client, po).value();
    heartbeats = loop->every(Millis(500), [this] { pub->heartbeat(); });
  }

  core::Result<weightstore::Reader*> reader(const std::string& id, core::ShardLayout l,
                                            bool serve = false) {
    engines.push_back(core::TransferEngine::create(*loop, same_host()).value());
    weightstore::ReaderOptions ro;
    ro.model = "policy";
    ro.holder_id = id;
    ro.topology.host = "node-1";
    ro.serve = serve;
    ro.layout = std::move(l);
    SLUICE_ASSIGN_OR_RETURN(auto r,
                            weightstore::Reader::create(*loop, *engines.back(), *client, ro));
    readers.push_back(std::move(r));
    return readers.back().get();
  }
};

bool same(std::span<const std::uint8_t> got, const std::vector<std::uint8_t>& want) {
  return got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0;
}

}  // namespace

TEST_SUITE("weightstore.reader_shard") {
  TEST_CASE("every rank of tp 2 and 4 reads only its shard, bit for bit the sliced version") {
    Setup s;
    Version v = make_version(7);
    REQUIRE(s.pub->publish(1, v.views()).is_ok());
    std::uint64_t split_bytes = 0, replicated = 0;
    for (const auto& t : kTensors)
      (t.split == core::Split::kReplicated ? replicated : split_bytes) += t.rows * t.cols * t.elem;
    for (std::uint32_t tp : {2u, 4u}) {
      std::uint64_t all_ranks = 0;
      for (std::uint32_t r = 0; r < tp; ++r) {
        CAPTURE(tp);
        CAPTURE(r);
        auto reader =
            s.reader("rollout-" + std::to_string(tp) + "-" + std::to_string(r), layout(r, tp));
        REQUIRE_MESSAGE(reader.is_ok(), reader.status().to_string());
        auto pulled = (*reader)->pull(1);
        REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
        REQUIRE((*reader)->swap().value() == 1);
        for (const auto& t : kTensors) {
          auto got = (*reader)->current_tensor("model." + t.name + ".weight");
          REQUIRE_MESSAGE(got.is_ok(), got.status().to_string());
          CHECK(same(*got, reference(v, t, r, tp)));
        }
        const core::Manifest* m = (*reader)->current_manifest();
        CHECK(m->tensors[0].shape == std::vector<std::uint64_t>{512 / tp, 64});
        CHECK(m->tensors[2].shape == std::vector<std::uint64_t>{64, 64 / tp});
        // On the wire: exactly the shard, against the whole version.
        const std::uint64_t read = (*reader)->last_stats().bytes;
        CHECK_FALSE((*reader)->last_read_whole_chunks());
        CHECK((*reader)->last_version_bytes() == v.bytes.size());
        CHECK(read == split_bytes / tp + replicated);
        MESSAGE("tp " << tp << " rank " << r << ": read " << read << " of " << v.bytes.size()
                      << " bytes (" << static_cast<double>(read) / v.bytes.size() << ")");
        all_ranks += read;
      }
      CHECK(all_ranks == split_bytes + tp * replicated);
    }
  }

  TEST_CASE("a layout the actor did not declare is read as whole verified chunks") {
    Setup s;
    Version v = make_version(8);
    REQUIRE(s.pub->publish(1, v.views()).is_ok());
    core::ShardLayout l = layout(1, 2);
    l.splits["wo"] = core::Split::kRows;  // not what the job declared
    auto reader = s.reader("rollout-undeclared", l);
    REQUIRE(reader.is_ok());
    auto pulled = (*reader)->pull(1);
    REQUIRE_MESSAGE(pulled.is_ok(), pulled.status().to_string());
    REQUIRE((*reader)->swap().is_ok());
    CHECK((*reader)->last_read_whole_chunks());
    for (auto t : kTensors) {
      if (t.name == "wo") t.split = core::Split::kRows;
      auto got = (*reader)->current_tensor("model." + t.name + ".weight");
      REQUIRE(got.is_ok());
      CHECK(same(*got, reference(v, t, 1, 2)));
    }
    // Whole chunks: the head's columns touch all its chunks, so more than the shard moved.
    CHECK((*reader)->last_stats().bytes % kChunk == v.bytes.size() % kChunk);
    CHECK((*reader)->last_stats().bytes < v.bytes.size());
    CHECK((*reader)->last_stats().bytes > (v.bytes.size() - 256) / 2 + 256);
  }

  TEST_CASE("a cast on the way: F32 tensors arrive as bf16 of their slice") {
    Setup s;
    Version v = make_version(9);
    REQUIRE(s.pub->publish(1, v.views()).is_ok());
    core::ShardLayout l = layout(1, 2);
    l.cast = "bf16";
    auto reader = s.reader("rollout-bf16", l);
    REQUIRE(reader.is_ok());
    REQUIRE((*reader)->pull(1).is_ok());
    REQUIRE((*reader)->swap().is_ok());
    CHECK_FALSE((*reader)->last_read_whole_chunks());
    for (const auto& t : kTensors) {
      auto slice = reference(v, t, 1, 2);
      std::vector<std::uint8_t> want = slice;
      if (t.dtype == "F32") {
        want.clear();
        for (std::size_t i = 0; i < slice.size(); i += 4) {
          float f;
          std::memcpy(&f, slice.data() + i, 4);
          const std::uint16_t b = core::bf16_from_f32(f);
          want.push_back(static_cast<std::uint8_t>(b & 0xff));
          want.push_back(static_cast<std::uint8_t>(b >> 8));
        }
      }
      auto got = (*reader)->current_tensor("model." + t.name + ".weight");
      REQUIRE(got.is_ok());
      CHECK(same(*got, want));
    }
    CHECK((*reader)->current_manifest()->tensors[0].dtype == "BF16");
  }

  TEST_CASE("bad layouts get a clear error and nothing is loaded") {
    Setup s;
    Version v = make_version(10);
    REQUIRE(s.pub->publish(1, v.views()).is_ok());
    SUBCASE("a layout that does not tile a tensor") {
      auto reader = s.reader("rollout-tp3", layout(0, 3));
      REQUIRE(reader.is_ok());
      auto pulled = (*reader)->pull(1);
      CHECK(pulled.status().code() == core::Code::kInvalidArgument);
      CHECK(pulled.status().message().find("tensor 'embed' (shape [512, 64]): tp_size 3 does not "
                                           "divide dim 0") != std::string::npos);
      CHECK((*reader)->staged_version() == 0);
      CHECK((*reader)->current_version() == 0);
      CHECK((*reader)->last_stats().bytes == 0);
    }
    SUBCASE("a name map that misses a tensor") {
      core::ShardLayout l = layout(0, 2);
      l.names.erase("wo");
      auto reader = s.reader("rollout-names", l);
      REQUIRE(reader.is_ok());
      auto pulled = (*reader)->pull(1);
      CHECK(pulled.status().code() == core::Code::kInvalidArgument);
      CHECK(pulled.status().message().find("the name map has no entry for tensor 'wo'") !=
            std::string::npos);
      CHECK((*reader)->staged_version() == 0);
      CHECK((*reader)->last_stats().bytes == 0);
    }
    SUBCASE("a cast to an unsupported dtype") {
      core::ShardLayout l = layout(0, 2);
      l.cast = "int4";
      auto reader = s.reader("rollout-int4", l);
      CHECK(reader.status().code() == core::Code::kInvalidArgument);
      CHECK(reader.status().message().find("unsupported cast 'int4'") != std::string::npos);
    }
    SUBCASE("a shard reader cannot serve the whole version") {
      auto reader = s.reader("rollout-serve", layout(0, 2), true);
      CHECK(reader.status().message().find("set serve to false") != std::string::npos);
    }
  }
}

namespace {

// Reads rank 1 of tp 2 straight from two holders' memory (no store): `bad` serves the version
// with every 997th byte flipped, `good` serves it as published.
// Version 1 of `v` as the actor would publish it, with the shard checksums of each tensor-parallel
// size in `tp_sizes` declared.
core::Manifest signed_for(const Version& v, std::initializer_list<std::uint32_t> tp_sizes) {
  std::vector<core::TensorSpec> specs;
  for (const auto& t : v.views())
    specs.push_back({t.name, t.dtype, t.shape, v.offset.at(t.name), t.bytes});
  core::Manifest m =
      core::make_manifest("policy", 1, specs, v.bytes.data(), v.bytes.size(), kChunk).value();
  for (std::uint32_t tp : tp_sizes)
    REQUIRE(core::add_shard_checksums(m, layout(0, tp), v.bytes.data()).is_ok());
  return m;
}

core::Result<weightstore::Pulled> read_from(bool second_good) {
  auto loop = core::EventLoop::create().value();
  auto engine = core::TransferEngine::create(*loop, same_host()).value();
  auto reader_engine = core::TransferEngine::create(*loop, same_host()).value();
  Version v = make_version(11);
  core::Manifest m = signed_for(v, {2});
  auto bad = engine->allocate(v.bytes.size()).value();
  auto good = engine->allocate(v.bytes.size()).value();
  std::memcpy(bad->data(), v.bytes.data(), v.bytes.size());
  std::memcpy(good->data(), v.bytes.data(), v.bytes.size());
  for (std::size_t i = 0; i < v.bytes.size(); i += 997)
    bad->data()[i] ^= 0x5a;
  if (!second_good) std::memcpy(good->data(), bad->data(), v.bytes.size());
  auto plan = std::make_shared<weightstore::ReadPlan>();
  plan->manifest = m;
  plan->holders = {{"bad", "", bad->descriptor().encode(), 0},
                   {"good", "", good->descriptor().encode(), 0}};
  plan->chunks.assign(m.chunk_count(), weightstore::ChunkSources{{0, 1}});
  std::vector<core::ReadSource> sources = {{"bad", bad->descriptor()},
                                           {"good", good->descriptor()}};
  std::optional<core::Result<weightstore::Pulled>> out;
  weightstore::read_shard_async(
      *reader_engine, plan, std::move(sources), core::plan_shard(m, layout(1, 2)).value(),
      layout(1, 2), {}, [&](core::Result<weightstore::Pulled> r) { out.emplace(std::move(r)); });
  REQUIRE(loop->run_until([&] { return out.has_value(); }, Millis(20000)));
  if (out->is_ok()) {
    // The tensors are compared here, while the buffers' engine is alive.
    for (const auto& t : kTensors) {
      const core::TensorSpec* spec = nullptr;
      for (const auto& s : (*out)->manifest.tensors)
        if (s.name == "model." + t.name + ".weight") spec = &s;
      REQUIRE(spec != nullptr);
      CHECK(same({(*out)->buffer->data() + spec->offset, spec->bytes}, reference(v, t, 1, 2)));
    }
    (*out)->buffer.reset();
  }
  return std::move(*out);
}

}  // namespace

TEST_SUITE("weightstore.reader_shard") {
  TEST_CASE("a holder serving wrong bytes is caught per assembled chunk and read around") {
    auto got = read_from(true);
    REQUIRE_MESSAGE(got.is_ok(), got.status().to_string());
    // Whatever the bad holder supplied failed its chunk's signed checksum and was read again.
    if (!got->stats.bytes_per_source.empty() && got->stats.bytes_per_source[0] > 0)
      CHECK(got->stats.checksum_failures > 0);
    CHECK_FALSE(got->whole_chunks);
  }

  TEST_CASE("a shard no holder has intact fails with data_loss, not torn bytes") {
    auto got = read_from(false);
    CHECK(got.status().code() == core::Code::kDataLoss);
    CHECK(got.status().message().find("matched its signed checksum from no holder") !=
          std::string::npos);
  }
}

TEST_SUITE("weightstore.reader_shard") {
  TEST_CASE("over tcp, the holder sends each rank only its shard's bytes (counted on its socket)") {
    auto loop = core::EventLoop::create().value();
    // The holder's memory, served by a chunk server whose counters are what left its sockets.
    auto holder_engine = core::TransferEngine::create(*loop, same_host()).value();
    auto server = core::ChunkServer::create(*loop, "127.0.0.1").value();
    core::TransferOptions tcp;
    tcp.ucx_config = {{"TLS", "tcp"}};
    tcp.stream_host = "127.0.0.1";
    auto engine = core::TransferEngine::create(*loop, tcp).value();
    Version v = make_version(12);
    core::Manifest m = signed_for(v, {2, 4});
    auto held = holder_engine->allocate(v.bytes.size()).value();
    std::memcpy(held->data(), v.bytes.data(), v.bytes.size());
    core::RegionDescriptor d = held->descriptor();
    d.host = "trainer-host";  // another machine: read over its chunk stream
    d.stream = server->addresses();
    d.stream_token = server->expose(held->data(), v.bytes.size()).value();
    auto plan = std::make_shared<weightstore::ReadPlan>();
    plan->manifest = m;
    plan->holders = {{"actor-0", "", d.encode(), 3}};
    plan->chunks.assign(m.chunk_count(), weightstore::ChunkSources{{0}});
    auto wire = [&] {
      auto s = server->stats();
      return std::pair<std::uint64_t, std::uint64_t>(s.bytes, s.requests);
    };

    // The whole version, as a reader without a layout reads it.
    auto [b0, q0] = wire();
    {
      auto dst = engine->allocate(v.bytes.size()).value();
      auto whole =
          engine->read_sync({{"actor-0", d}}, core::whole_region_chunks(m.layout()), *dst, {});
      REQUIRE_MESSAGE(whole.is_ok(), whole.status().to_string());
      CHECK(std::memcmp(dst->data(), v.bytes.data(), v.bytes.size()) == 0);
    }
    auto [b1, q1] = wire();
    const std::uint64_t whole_wire = b1 - b0;
    CHECK(whole_wire - (q1 - q0) * core::chunk_wire::kReplyBytes == v.bytes.size());

    std::uint64_t replicated = 0;
    for (const auto& t : kTensors)
      if (t.split == core::Split::kReplicated) replicated += t.rows * t.cols * t.elem;
    for (std::uint32_t tp : {2u, 4u}) {
      for (std::uint32_t r = 0; r < tp; ++r) {
        CAPTURE(tp);
        CAPTURE(r);
        auto [s0, n0] = wire();
        std::optional<core::Result<weightstore::Pulled>> out;
        weightstore::read_shard_async(
            *engine, plan, {{"actor-0", d}}, core::plan_shard(m, layout(r, tp)).value(),
            layout(r, tp), {},
            [&](core::Result<weightstore::Pulled> p) { out.emplace(std::move(p)); });
        REQUIRE(loop->run_until([&] { return out.has_value(); }, Millis(20000)));
        REQUIRE_MESSAGE(out->is_ok(), out->status().to_string());
        auto [s1, n1] = wire();
        const std::uint64_t sent = s1 - s0,
                            payload = sent - (n1 - n0) * core::chunk_wire::kReplyBytes;
        CHECK(payload == (*out)->stats.bytes);
        CHECK(payload == (v.bytes.size() - replicated) / tp + replicated);
        CHECK(sent < whole_wire / tp + replicated + (n1 - n0) * core::chunk_wire::kReplyBytes + 1);
        MESSAGE("tcp, tp " << tp << " rank " << r << ": the holder sent " << sent
                           << " bytes on the wire (" << (n1 - n0) << " replies) against "
                           << whole_wire << " for the whole version ("
                           << static_cast<double>(sent) / static_cast<double>(whole_wire) << ")");
        (*out)->buffer.reset();
      }
    }
    server->withdraw(d.stream_token);
  }
}
