// The actor's record of consumed trajectories: durable only once a checkpoint holds it, carried
// through a checkpoint exactly, older checkpoints still read, and the summary's lists bounded.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "actor/checkpoint.hpp"
#include "actor/consumed.hpp"
#include "core/checksum.hpp"
#include "core/config.hpp"

using namespace sluice;
using namespace sluice::actor;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("sluice-consumed-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string id(int p, int k) {
  return "p" + std::to_string(p) + "/" + std::to_string(k);
}

ConsumedOptions with_checkpoints(std::uint32_t group) {
  ConsumedOptions o;
  o.group_size = group;
  o.checkpoints = true;
  return o;
}

}  // namespace

TEST_SUITE("actor.consumed") {
  TEST_CASE("a consumed id is durable once a checkpoint holds it, and survives a restart") {
    const fs::path dir = temp_dir("durable");
    Consumed c(with_checkpoints(2));
    c.consume(id(0, 0), true);
    c.consume(id(0, 1), false);
    c.consume(id(1, 1), true);
    CHECK_FALSE(c.durable(id(0, 0)));
    CHECK(c.unsynced());
    CheckpointState s;
    s.policy = "sim";
    s.policy_file = "policy-000001.state";
    c.save(s);
    REQUIRE(write_checkpoint(dir.string(), s).is_ok());
    CHECK(c.synced() == std::vector<std::string>{id(0, 0), id(0, 1), id(1, 1)});
    CHECK(c.durable(id(0, 1)));
    CHECK_FALSE(c.unsynced());
    c.consume(id(2, 0), true);  // after the checkpoint: lost with a kill

    auto back = read_checkpoint((dir / kCheckpointFile).string());
    REQUIRE(back.is_ok());
    CHECK(back->consumed_floor == 1);
    CHECK(back->consumed_listed == std::vector<std::string>{id(1, 1)});
    Consumed r(with_checkpoints(2));
    REQUIRE(r.restore(*back).is_ok());
    for (const auto& x : {id(0, 0), id(0, 1), id(1, 1)}) {
      CHECK(r.ids().contains(x));
      CHECK(r.durable(x));
    }
    CHECK_FALSE(r.ids().contains(id(2, 0)));
    CHECK_FALSE(r.ids().contains(id(1, 0)));
    CHECK(r.listed() == std::vector<std::string>{id(0, 0), id(0, 1), id(1, 1)});
    CHECK(r.trained_listed() == std::vector<std::string>{id(0, 0), id(1, 1)});
    CHECK(r.count() == 3);
    fs::remove_all(dir);
  }

  TEST_CASE("a format 1 checkpoint, which listed every consumed id, is still read") {
    const fs::path dir = temp_dir("format1");
    CheckpointState old;
    old.policy = "sim";
    old.policy_file = "policy-000001.state";
    old.consumed_ids = {id(0, 0), id(0, 1), id(3, 0)};
    old.trained_ids = {id(0, 0)};
    // Written as format 1 wrote it: the same frame, version 1, no set fields.
    auto body = core::config::to_json(old);
    for (const char* k :
         {"consumed_group_size", "consumed_floor", "consumed_listed", "ids_complete"})
      body.erase(k);
    const std::string text = body.dump();
    std::string out("SLUICEAC", 8);
    const std::uint32_t version = 1;
    const std::uint64_t len = text.size();
    out.append(reinterpret_cast<const char*>(&version), sizeof(version));
    out.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out += text;
    const std::uint64_t sum = core::chunk_checksum(out.data(), out.size());
    out.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
    std::ofstream(dir / kCheckpointFile, std::ios::binary) << out;

    auto back = read_checkpoint((dir / kCheckpointFile).string());
    REQUIRE(back.is_ok());
    Consumed r(with_checkpoints(2));
    REQUIRE(r.restore(*back).is_ok());
    CHECK(r.ids().contains(id(0, 1)));
    CHECK(r.ids().contains(id(3, 0)));
    CHECK_FALSE(r.ids().contains(id(1, 0)));
    CHECK(r.ids().floor() == 1);
    fs::remove_all(dir);
  }

  TEST_CASE("a damaged saved set is refused as data loss") {
    CheckpointState s;
    s.consumed_group_size = 2;
    s.consumed_floor = 5;
    s.consumed_listed = {id(1, 0)};
    Consumed r(with_checkpoints(2));
    CHECK(r.restore(s).code() == core::Code::kDataLoss);
  }

  TEST_CASE("the summary's lists stop at list_max and say so, the set does not") {
    ConsumedOptions o;
    o.group_size = 1;
    o.list_max = 10;
    Consumed c(o);
    for (int p = 0; p < 25; ++p)
      c.consume(id(p, 0), true);
    CHECK(c.listed().size() == 10);
    CHECK(c.trained_listed().size() == 10);
    CHECK_FALSE(c.ids_complete());
    CHECK(c.count() == 25);
    CHECK(c.durable(id(24, 0)));  // without checkpoints: durable on receipt
    CHECK(c.ids().entries() == 0);
  }
}
