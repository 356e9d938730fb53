// The attack suite's attempts on the bytes themselves (bench/attack.hpp): a member that serves the
// newest version with one byte changed, registered with the store as a copy of its own; and a
// member that answers an encrypted chunk stream in place of the holder a read plan names. Each
// plays with a transfer engine of its own and reads back as a real reader does
// (core::TransferEngine with the signed manifest's digests), so the reader's checks are the job's.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/attack_internal.hpp"
#include "format/shard.hpp"
#include "weightstore/client.hpp"
#include "wire/region_server.hpp"
#include "wire/transfer.hpp"

namespace sluice::cli::attack {

namespace {

using core::Result;
using core::Status;

constexpr int kPlans = 8;  // plans taken to find the forged copy among the holders

// An engine of the attacker's as `sec`'s member: chunk streams on (served and read), encrypted as
// `encryption` says.
Result<std::unique_ptr<core::TransferEngine>> engine_as(core::EventLoop& loop,
                                                        const core::Security& sec,
                                                        const std::string& encryption) {
  core::TransferOptions o;
  SLUICE_TRY(core::set_stream_security(o, encryption, "", sec, "attack"));
  return core::TransferEngine::create(loop, std::move(o));
}

// The manifest's chunks, each verified against its signed digest, every source allowed.
std::vector<core::ChunkRead> signed_chunks(const core::Manifest& m) {
  return core::whole_region_chunks(m.layout());
}

// A copy of `bytes` in memory that `engine` serves, with byte `flip` (if any) changed.
Result<std::unique_ptr<core::RegisteredBuffer>> served_copy(core::TransferEngine& engine,
                                                            const core::RegisteredBuffer& bytes,
                                                            std::size_t size,
                                                            std::optional<std::size_t> flip) {
  SLUICE_ASSIGN_OR_RETURN(auto buf, engine.allocate(size, false));
  std::memcpy(buf->data(), bytes.data(), size);
  if (flip) buf->data()[*flip] ^= 0x01;
  return buf;
}

}  // namespace

void play_served_bytes(core::EventLoop& loop, const Target& t,
                       weightstore::StoreClient& operator_store, const std::string& member,
                       Report& report) {
  const char* names[] = {"member-forged-bytes", "stand-in-holder", "clear-read-encrypted-job",
                         "share-not-following"};
  auto skip_all = [&](const std::string& why) {
    for (const char* n : names)
      report.skip(n, why);
  };
  auto operator_sec = member_security(t, core::kRoleOperator);
  auto member_sec = member_security(t, member);
  if (!operator_sec.is_ok() || !member_sec.is_ok()) {
    return skip_all("no keys: " +
                    brief(!operator_sec.is_ok() ? operator_sec.status() : member_sec.status()));
  }
  auto reader = engine_as(loop, *operator_sec, "auto");
  if (!reader.is_ok()) return skip_all("no transfer engine: " + brief(reader.status()));
  // The newest version as the job serves it, verified: the bytes the attacker starts from.
  auto honest = weightstore::pull(**reader, operator_store, t.model, 0, {});
  if (!honest.is_ok())
    return skip_all("could not read the newest version: " + brief(honest.status()));
  const core::Manifest& m = honest->manifest;
  if (m.digests.empty() || !t.members) {
    return skip_all(fmt::format("version {} carries no signed digests (auth plain)", m.version));
  }
  const std::size_t size = m.total_bytes;
  const std::size_t flip = std::min<std::size_t>(size - 1, m.chunk_bytes / 2);

  // 1. The member registers, under an id of its own, a copy with one byte of chunk 0 changed and
  //    the signed manifest as it is. The store cannot see bytes and accepts it; readers must not.
  {
    Attempt a{"member-forged-bytes",
              fmt::format("{} serves version {} with byte {} changed, registered as {}-forger",
                          member, m.version, flip, member),
              "", Verdict::kRefused};
    auto as_member = engine_as(loop, *member_sec, "auto");
    auto store = weightstore::StoreClient::create(loop, t.store, *member_sec);
    Result<std::unique_ptr<core::RegisteredBuffer>> copy = core::internal_error("no engine");
    if (as_member.is_ok()) copy = served_copy(**as_member, *honest->buffer, size, flip);
    if (!as_member.is_ok() || !store.is_ok() || !copy.is_ok()) {
      report.skip(a.name, "could not serve a copy: " + brief(!as_member.is_ok() ? as_member.status()
                                                             : !store.is_ok()   ? store.status()
                                                                                : copy.status()));
    } else {
      weightstore::HolderRegistration r;
      r.holder_id = member + "-forger";
      r.endpoint = "tcp://127.0.0.1:9";
      r.descriptor = (*copy)->descriptor().encode();
      r.manifest = m;
      auto registered = (*store)->register_holder(r);
      if (!registered.is_ok()) {
        a.got = "the store refused the copy: " + brief(registered.status());
      } else {
        // A reader sent to it by a read plan, as the job's readers are: only that source.
        std::optional<core::RegionDescriptor> named;
        std::vector<std::uint64_t> leases;
        for (int i = 0; i < kPlans && !named; ++i) {
          auto p = operator_store.plan(t.model, m.version, {});
          if (!p.is_ok()) break;
          leases.push_back(p->lease_id);
          for (const auto& h : p->holders) {
            if (h.holder_id != r.holder_id) continue;
            if (auto d = core::RegionDescriptor::decode(h.descriptor); d.is_ok()) named = *d;
          }
        }
        auto into = (*reader)->allocate(size, false);
        Result<core::ReadStats> read = core::not_found(
            fmt::format("no read plan of {} in {} named the forged copy", m.version, kPlans));
        if (named && into.is_ok()) {
          read = (*reader)->read_sync({core::ReadSource(r.holder_id, *named, r.holder_id)},
                                      signed_chunks(m), **into, {});
        }
        for (auto lease : leases)
          operator_store.release(lease).ignore();
        (*store)->unpublish(r.holder_id, t.model, m.version).ignore();
        if (read.is_ok()) {
          const bool forged = std::memcmp((*into)->data(), honest->buffer->data(), size) != 0;
          a.got = forged ? "the reader loaded the changed bytes"
                         : "the read succeeded with the signed bytes (the change was not served)";
          a.verdict = Verdict::kBreach;
        } else if (read.status().code() == core::Code::kNotFound) {
          a.got = read.status().message();
          a.verdict = Verdict::kSkipped;
        } else {
          a.got = "registered; a reader sent to it by a read plan refused the copy: " +
                  brief(read.status());
        }
      }
      if (a.verdict == Verdict::kSkipped) {
        report.skip(a.name, a.got);
      } else {
        report.add(std::move(a));
      }
    }
  }

  // 2. The member serves the signed bytes on an encrypted stream, and a reader is led to it as to
  //    the holder a plan names (another member's: a holder of the newest version, else the
  //    actor). The reader must refuse the server's key; the same server read as itself is the
  //    control that shows it serves.
  {
    std::string other;
    auto p = operator_store.plan(t.model, m.version, {});
    if (p.is_ok()) {
      for (const auto& h : p->holders) {
        if (other.empty() && !t.members->owns_holder_id(member, h.holder_id)) other = h.holder_id;
      }
      operator_store.release(p->lease_id).ignore();
    }
    // With hand-off the relays may be the only holders left: the actor's id then, which a plan
    // names while the actor serves.
    if (other.empty() && !t.members->owns_holder_id(member, core::kRoleActor)) {
      other = core::kRoleActor;
    }
    auto stand_in = engine_as(loop, *member_sec, "on");
    auto sure_reader = engine_as(loop, *operator_sec, "on");
    Result<std::unique_ptr<core::RegisteredBuffer>> copy = core::internal_error("no engine");
    if (stand_in.is_ok()) copy = served_copy(**stand_in, *honest->buffer, size, std::nullopt);
    if (other.empty()) {
      report.skip("stand-in-holder", "the newest version has no holder but " + member);
    } else if (!stand_in.is_ok() || !sure_reader.is_ok() || !copy.is_ok()) {
      report.skip("stand-in-holder", "no encrypted stream to serve or read: " +
                                         brief(!stand_in.is_ok()      ? stand_in.status()
                                               : !sure_reader.is_ok() ? sure_reader.status()
                                                                      : copy.status()));
    } else {
      core::RegionDescriptor d = (*copy)->descriptor();
      d.host = "stand-in";  // as from another machine: read over its chunk stream, encrypted
      auto read_as = [&](const std::string& holder) {
        auto into = (*sure_reader)->allocate(size, false);
        if (!into.is_ok()) return into.status();
        auto r = (*sure_reader)
                     ->read_sync({core::ReadSource("stand-in", d, holder)}, signed_chunks(m),
                                 **into, {});
        return r.status();
      };
      Status as_other = read_as(other);
      Status as_itself = read_as(member);
      Attempt a{"stand-in-holder",
                fmt::format("{} answers the encrypted chunk stream of version {} for {}", member,
                            m.version, other),
                "", Verdict::kRefused};
      a.got = as_other.is_ok() ? "the reader loaded it" : "refused: " + brief(as_other);
      a.got += as_itself.is_ok()
                   ? "; the same server read as itself: verified"
                   : "; the same server read as itself failed too: " + brief(as_itself);
      if (as_other.is_ok()) a.verdict = Verdict::kBreach;
      report.add(std::move(a));
    }
  }

  // 3. Where the job encrypts its chunk streams, a reader without the job's stream keys (the
  //    Python Reader given none reads so) asks a holder the plan names for the newest version
  //    in the clear, over its chunk stream. The holder must not serve it; the same read with the
  //    keys is the control.
  {
    const char* name = "clear-read-encrypted-job";
    auto p = operator_store.plan(t.model, m.version, {});
    std::optional<weightstore::ReadPlan::Holder> holder;
    if (p.is_ok()) {
      for (const auto& h : p->holders)
        if (!holder) holder = h;
      operator_store.release(p->lease_id).ignore();
    }
    auto d = holder ? core::RegionDescriptor::decode(holder->descriptor)
                    : Result<core::RegionDescriptor>(core::not_found("no holder in the plan"));
    auto clear = engine_as(loop, *operator_sec, "off");
    auto keyed = engine_as(loop, *operator_sec, "on");
    if (t.stream_encryption != "on") {
      report.skip(name,
                  "the job's chunk streams are encrypted only between datacenters "
                  "(stream_encryption " +
                      t.stream_encryption + ")");
    } else if (!d.is_ok() || !clear.is_ok() || !keyed.is_ok()) {
      report.skip(name, "no holder stream to read: " + brief(!d.is_ok()       ? d.status()
                                                             : !clear.is_ok() ? clear.status()
                                                                              : keyed.status()));
    } else {
      d->host = "elsewhere";  // as from another machine: over its chunk stream
      auto read_with = [&](core::TransferEngine& e) {
        auto into = e.allocate(size, false);
        if (!into.is_ok()) return into.status();
        return e
            .read_sync({core::ReadSource(holder->holder_id, *d, holder->holder_id)},
                       signed_chunks(m), **into, {})
            .status();
      };
      Status in_clear = read_with(**clear);
      Status with_keys = read_with(**keyed);
      Attempt a{name,
                fmt::format("a reader without stream keys reads version {} from {} in the clear",
                            m.version, holder->holder_id),
                "", Verdict::kRefused};
      a.got =
          in_clear.is_ok() ? "the holder served it in the clear" : "refused: " + brief(in_clear);
      a.got += with_keys.is_ok()
                   ? "; the same read with the job's keys: verified"
                   : "; the same read with the job's keys failed too: " + brief(with_keys);
      if (in_clear.is_ok()) a.verdict = Verdict::kBreach;
      report.add(std::move(a));
    }
  }

  // 4. A host share that does not follow from the signed version: the member registers the
  //    newest version's bytes under a share's name (tp 2, rank 0), with one digest changed, as a
  //    copy of its own. No actor signs a share: the store must check it against the version,
  //    so that a host's readers, which read only their host's share, get no other bytes.
  {
    Attempt a{"share-not-following",
              fmt::format("{} registers a host share of version {} that its manifest does not "
                          "give (one digest changed)",
                          member, m.version),
              "", Verdict::kRefused};
    auto store = weightstore::StoreClient::create(loop, t.store, *member_sec);
    if (!store.is_ok()) {
      report.skip(a.name, "no store client: " + brief(store.status()));
    } else {
      weightstore::HolderRegistration r;
      r.holder_id = member + "-share-forger";
      r.endpoint = "tcp://127.0.0.1:9";
      r.descriptor = "none";
      r.manifest = m;
      r.manifest.model = core::share_model(m.model, 2, 0, "");
      r.manifest.signature.clear();
      if (!r.manifest.digests.empty()) r.manifest.digests[0].bytes[0] ^= 0x01;
      auto registered = (*store)->register_holder(r);
      if (registered.is_ok()) {
        a.got = "the store took the share";
        a.verdict = Verdict::kBreach;
        (*store)->unpublish(r.holder_id, r.manifest.model, m.version).ignore();
      } else {
        a.got = "refused: " + brief(registered.status());
      }
      report.add(std::move(a));
    }
  }
}

}  // namespace sluice::cli::attack
