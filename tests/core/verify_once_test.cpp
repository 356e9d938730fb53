// Verify once per host (design.md, where bytes are verified): a reader checks a chunk by its
// checksum alone only when its source is a verified copy of the reader's own user on the reader's
// own host, as the kernel confirms (wire/segment_owner.hpp); every other source is checked against
// the signed digests. Holders are `sluice transfer-source` processes over shared memory; one runs
// under the user nobody (setpriv) where the tests run as root.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "../support/transfer_source.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "wire/messaging.hpp"
#include "wire/region_server.hpp"
#include "wire/segment_owner.hpp"
#include "wire/transfer.hpp"

using namespace sluice::core;

namespace {

constexpr std::uint32_t kNobody = 65534;
constexpr std::uint64_t kBytes = 8u << 20, kChunk = 1u << 20;

// setpriv (util-linux) where it is installed; empty otherwise.
std::string setpriv_path() {
  for (const char* p : {"/usr/bin/setpriv", "/bin/setpriv"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

// Whether a holder can be started under another user: this process is root and has setpriv.
bool can_run_as_nobody() {
  if (::geteuid() != 0) {
    MESSAGE("skipped: a holder under another user needs the tests to run as root");
    return false;
  }
  if (setpriv_path().empty()) {
    MESSAGE("skipped: setpriv is not installed");
    return false;
  }
  return true;
}

// A `sluice transfer-source` over `tls` serving kBytes of seeded data (chunk `corrupt` changed
// after its sums were taken, when not -1), as this user or, with `nobody`, as user nobody.
struct Holder : sluice::testing::TransferSource {
  Holder(const std::string& tls, std::uint64_t seed, long corrupt = -1, bool nobody = false)
      : TransferSource(tls, kBytes, kChunk, seed, corrupt,
                       nobody ? as_nobody() : std::vector<std::string>{}) {}
  static std::vector<std::string> as_nobody() {
    const std::string id = std::to_string(kNobody);
    return {setpriv_path(), "--reuid=" + id, "--regid=" + id, "--clear-groups", "--"};
  }
};

struct Reader : sluice::testing::SourceReader {
  using SourceReader::SourceReader;
  Result<ReadStats> read(const std::vector<ReadSource>& sources, const RegionLayout& layout,
                         RegisteredBuffer& dst) {
    ReadOptions opt;
    opt.max_in_flight_per_source = 1;  // the first source gets the first chunk
    return engine->read_sync(sources, whole_region_chunks(layout), dst, opt);
  }
};

bool holds_seeded(const RegisteredBuffer& buf, std::uint64_t seed) {
  std::vector<std::uint8_t> want(kBytes);
  fill_pseudo_random(want.data(), want.size(), seed);
  return buf.size() >= kBytes && std::memcmp(buf.data(), want.data(), kBytes) == 0;
}

}  // namespace

TEST_SUITE("core.verify_once") {
  TEST_CASE("a verified copy of this user on this host is read with the checksum alone") {
    const std::uint64_t seed = 21;
    Holder h("sm", seed);
    Reader rd("sm");
    auto region = rd.describe(h);
    REQUIRE(!region.layout.digests.empty());
    CHECK(region.descriptor.verified);
    CHECK(region.descriptor.uid == ::geteuid());
    auto dst = rd.engine->allocate(kBytes).value();

    auto st = rd.read({{"h", region.descriptor}}, region.layout, *dst);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(st->checksum_only_bytes == kBytes);
    CHECK(st->owner_unconfirmed == 0);
    CHECK(holds_seeded(*dst, seed));

    // Every other case is checked by digest: a copy that does not say it is verified, one that
    // names another host or another user, and any copy for a reader that trusts none.
    RegionDescriptor unverified = region.descriptor;
    unverified.verified = false;
    RegionDescriptor elsewhere = region.descriptor;
    elsewhere.host = "another-boot-id/1";
    RegionDescriptor other_user = region.descriptor;
    other_user.uid = ::geteuid() + 1;
    for (const auto& d : {unverified, elsewhere, other_user}) {
      std::memset(dst->data(), 0, kBytes);
      auto by_digest = rd.read({{"h", d}}, region.layout, *dst);
      REQUIRE_MESSAGE(by_digest.is_ok(), by_digest.status().to_string());
      CHECK(by_digest->checksum_only_bytes == 0);
      CHECK(by_digest->owner_unconfirmed == 0);
      CHECK(holds_seeded(*dst, seed));
    }
    Reader strict("sm", /*trust_same_user=*/false);
    auto r2 = strict.describe(h);
    auto dst2 = strict.engine->allocate(kBytes).value();
    auto all_digest = strict.read({{"h", r2.descriptor}}, r2.layout, *dst2);
    REQUIRE_MESSAGE(all_digest.is_ok(), all_digest.status().to_string());
    CHECK(all_digest->checksum_only_bytes == 0);
    CHECK(holds_seeded(*dst2, seed));
  }

  TEST_CASE("a chunk stream is checked by digest, even from a verified copy on this host") {
    const std::uint64_t seed = 22;
    Holder h("tcp", seed);
    Reader rd("tcp");
    auto region = rd.describe(h);
    REQUIRE(region.descriptor.verified);
    auto dst = rd.engine->allocate(kBytes).value();
    auto st = rd.read({{"h", region.descriptor}}, region.layout, *dst);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(st->checksum_only_bytes == 0);
    CHECK(holds_seeded(*dst, seed));
  }

  TEST_CASE("a same-user copy that claims a changed byte verified is caught by the checksum") {
    const std::uint64_t seed = 23;
    Holder bad("sm", seed, /*corrupt=*/0), good("sm", seed);
    Reader rd("sm");
    auto rbad = rd.describe(bad), rgood = rd.describe(good);
    // It changed a byte after taking its sums, and says so; the lie is forged here.
    CHECK_FALSE(rbad.descriptor.verified);
    RegionDescriptor lying = rbad.descriptor;
    lying.verified = true;
    auto dst = rd.engine->allocate(kBytes).value();

    auto only = rd.read({{"bad", lying}}, rbad.layout, *dst);
    REQUIRE_FALSE(only.is_ok());
    CHECK(only.status().code() == Code::kDataLoss);
    CHECK(only.status().message().find("bad: checksum mismatch") != std::string::npos);

    auto st = rd.read({{"bad", lying}, {"good", rgood.descriptor}}, rbad.layout, *dst);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(st->checksum_failures == 1);
    CHECK(holds_seeded(*dst, seed));

    // The same lie from another host is not believed: the digest refuses the byte.
    lying.host = "another-boot-id/1";
    auto remote = rd.read({{"bad", lying}}, rbad.layout, *dst);
    REQUIRE_FALSE(remote.is_ok());
    CHECK(remote.status().message().find("bad: digest mismatch") != std::string::npos);
  }

  TEST_CASE("a holder under another user is checked by digest, whatever its descriptor claims") {
    if (!can_run_as_nobody()) return;
    const std::uint64_t seed = 24;
    Holder stranger("sm", seed, -1, /*nobody=*/true);
    Reader rd("sm");
    auto region = rd.describe(stranger);
    CHECK(region.descriptor.uid == kNobody);
    auto dst = rd.engine->allocate(kBytes).value();

    // What it says of itself: verified, but another user's: the digest decides.
    auto honest = rd.read({{"stranger", region.descriptor}}, region.layout, *dst);
    REQUIRE_MESSAGE(honest.is_ok(), honest.status().to_string());
    CHECK(honest->checksum_only_bytes == 0);
    CHECK(honest->owner_unconfirmed == 0);
    CHECK(holds_seeded(*dst, seed));

    // Claiming the reader's user: the kernel says the memory is nobody's. The claim is counted
    // and the read goes on by digest: a good copy is never refused.
    RegionDescriptor forged = region.descriptor;
    forged.uid = ::geteuid();
    forged.verified = true;
    std::memset(dst->data(), 0, kBytes);
    auto claimed = rd.read({{"stranger", forged}}, region.layout, *dst);
    REQUIRE_MESSAGE(claimed.is_ok(), claimed.status().to_string());
    CHECK(claimed->checksum_only_bytes == 0);
    CHECK(claimed->owner_unconfirmed == 1);
    CHECK(holds_seeded(*dst, seed));
  }

  TEST_CASE("another user's holder that serves a changed byte as verified is refused by digest") {
    if (!can_run_as_nobody()) return;
    const std::uint64_t seed = 25;
    Holder bad("sm", seed, /*corrupt=*/0, /*nobody=*/true), good("sm", seed);
    Reader rd("sm");
    auto rbad = rd.describe(bad), rgood = rd.describe(good);
    RegionDescriptor forged = rbad.descriptor;
    forged.uid = ::geteuid();
    forged.verified = true;
    auto dst = rd.engine->allocate(kBytes).value();

    auto only = rd.read({{"bad", forged}}, rbad.layout, *dst);
    REQUIRE_FALSE(only.is_ok());
    CHECK(only.status().code() == Code::kDataLoss);
    CHECK(only.status().message().find("bad: digest mismatch") != std::string::npos);

    // Retried elsewhere: the good copy (this user's) supplies the chunk.
    auto st = rd.read({{"bad", forged}, {"good", rgood.descriptor}}, rbad.layout, *dst);
    REQUIRE_MESSAGE(st.is_ok(), st.status().to_string());
    CHECK(st->checksum_failures == 1);
    CHECK(st->owner_unconfirmed == 1);
    CHECK(holds_seeded(*dst, seed));
  }

  TEST_CASE("the kernel names the owner of shared memory, and what else may write it") {
    auto loop = EventLoop::create().value();
    TransferOptions o;
    o.ucx_config = {{"TLS", "sm"}};
    auto engine = TransferEngine::create(*loop, o).value();
    auto buf = engine->allocate(1u << 20).value();
    auto owner = mapped_segment_owner(buf->data() + 4096);
    REQUIRE_MESSAGE(owner.is_ok(), owner.status().to_string());
    CHECK(owner->owner == ::geteuid());
    CHECK(owner->creator == ::geteuid());
    CHECK(owner->owned_by(::geteuid()).is_ok());
    auto other = owner->owned_by(::geteuid() + 1);
    CHECK(other.code() == Code::kPermissionDenied);
    CHECK(other.message().find("belongs to user") != std::string::npos);
    MESSAGE("allocated in ", owner->what);

    // A segment its group may write is nobody's alone (UCX makes System V ones 0660).
    TransferOptions shared = o;
    shared.private_segments = false;
    auto engine2 = TransferEngine::create(*loop, shared).value();
    auto buf2 = engine2->allocate(1u << 20).value();
    auto open = mapped_segment_owner(buf2->data());
    REQUIRE_MESSAGE(open.is_ok(), open.status().to_string());
    if (open->what.rfind("sysv", 0) == 0) {
      CHECK((open->mode & S_IWGRP) != 0);
      CHECK(open->owned_by(::geteuid()).message().find("other users may write it") !=
            std::string::npos);
    }

    SegmentOwner handed_over{0, kNobody, 0600, "sysv segment 1"};
    CHECK(handed_over.owned_by(0).message().find("created by user 65534") != std::string::npos);

    int on_stack = 0;
    auto mine = mapped_segment_owner(&on_stack);
    REQUIRE(mine.is_ok());
    CHECK(mine->what == "this process's own memory");
    CHECK(mapped_segment_owner(reinterpret_cast<const void*>(16)).status().code() ==
          Code::kNotFound);
  }
}
