#include "weightstore/shard_read.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>

#include "core/checksum.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"

namespace sluice::weightstore {

using core::Result;
using core::Status;

namespace {

struct ShardJob {
  core::TransferEngine* engine = nullptr;
  std::shared_ptr<const ReadPlan> plan;
  std::vector<core::ReadSource> sources;
  core::ShardPlan shard;
  core::ShardLayout layout;
  core::ReadOptions options;
  std::function<void(Result<Pulled>)> done;
  const std::vector<std::uint64_t>* declared = nullptr;  // into plan->manifest
  // Its signed digests, when the version has them: checked instead of the checksums.
  const std::vector<core::Digest>* declared_digests = nullptr;
  std::unique_ptr<core::RegisteredBuffer> stream;  // the assembled shard stream
  core::ReadStats stats;                           // summed over every read
  std::size_t next_holder = 0;                     // the declared path's retries
  bool whole_chunks = false;
  // Read from the host share's relays (read_shard_via_share_async), as they receive it.
  struct Share {
    ShareStore store;
    Topology where;
    std::string model;                     // the share's (core::share_model)
    std::vector<core::ShardPiece> pieces;  // src_offset in the share's stream
    std::vector<bool> got;
    std::size_t left = 0;
    core::Clock::time_point progressed;
    std::uint64_t same_host_bytes = 0;
    bool appeared = false;  // the store has named the share's version
    core::Clock::time_point started;
    std::unique_ptr<core::EventLoop::Timer> timer;
    std::shared_ptr<ShardJob> self;  // keeps the job while a timer waits
  };
  std::unique_ptr<Share> share;

  std::string what() const {
    return "shard " + std::to_string(shard.tp_rank) + "/" + std::to_string(shard.tp_size) + " of " +
           plan->manifest.model + "@" + std::to_string(plan->manifest.version);
  }
  std::uint64_t chunk_bytes() const { return plan->manifest.chunk_bytes; }
  std::uint64_t stream_chunks() const {
    return shard.bytes / chunk_bytes() + (shard.bytes % chunk_bytes() != 0 ? 1 : 0);
  }
};

// The indices of every piece of the job's shard.
std::vector<std::size_t> every_piece(const ShardJob& job) {
  std::vector<std::size_t> all(job.shard.pieces.size());
  std::iota(all.begin(), all.end(), std::size_t{0});
  return all;
}

// A read's job, its buffer allocated: at least one byte, so that an empty shard (all its tensors
// empty) still gets a buffer to hand over. Null once `done` has been given the allocation's error.
std::shared_ptr<ShardJob> start_job(core::TransferEngine& engine,
                                    std::shared_ptr<const ReadPlan> plan,
                                    std::vector<core::ReadSource> sources, core::ShardPlan shard,
                                    core::ShardLayout layout, core::ReadOptions options,
                                    std::function<void(Result<Pulled>)> done) {
  auto job = std::make_shared<ShardJob>();
  job->engine = &engine;
  job->plan = std::move(plan);
  job->sources = std::move(sources);
  job->shard = std::move(shard);
  job->layout = std::move(layout);
  job->options = std::move(options);
  job->done = std::move(done);
  job->declared = core::declared_checksums(job->plan->manifest, job->shard);
  job->declared_digests = core::declared_digests(job->plan->manifest, job->shard);
  auto buf = engine.allocate(std::max<std::uint64_t>(job->shard.bytes, 1), false);
  if (!buf.is_ok()) {
    job->done(buf.status().with_context(job->what()));
    return nullptr;
  }
  job->stream = std::move(buf).value();
  return job;
}

void add_stats(core::ReadStats& sum, const core::ReadStats& s) {
  sum.bytes += s.bytes;
  sum.seconds += s.seconds;
  sum.retries += s.retries;
  sum.checksum_failures += s.checksum_failures;
  sum.mapped_bytes += s.mapped_bytes;
  sum.checksum_only_bytes += s.checksum_only_bytes;
  sum.owner_unconfirmed += s.owner_unconfirmed;
  if (sum.bytes_per_source.size() < s.bytes_per_source.size())
    sum.bytes_per_source.resize(s.bytes_per_source.size());
  for (std::size_t i = 0; i < s.bytes_per_source.size(); ++i)
    sum.bytes_per_source[i] += s.bytes_per_source[i];
  sum.failed_sources.insert(sum.failed_sources.end(), s.failed_sources.begin(),
                            s.failed_sources.end());
}

// The verified stream, cast when the layout asks, as the rollout's tensors.
void deliver(const std::shared_ptr<ShardJob>& job) {
  Pulled out;
  out.manifest = core::shard_manifest(job->plan->manifest, job->shard, job->layout);
  const bool same = out.manifest.total_bytes == job->shard.bytes &&
                    std::equal(out.manifest.tensors.begin(), out.manifest.tensors.end(),
                               job->shard.tensors.begin(), job->shard.tensors.end(),
                               [](const core::TensorSpec& a, const core::ShardTensor& b) {
                                 return a.dtype == b.dtype;
                               });
  if (same) {
    out.buffer = std::move(job->stream);
  } else {
    auto buf = job->engine->allocate(out.manifest.total_bytes, false);
    if (!buf.is_ok()) return job->done(buf.status().with_context(job->what()));
    out.buffer = std::move(buf).value();
    // After verification, a chunk's worth of input at a time.
    core::cast_shard(job->shard, job->layout, job->stream->data(), out.buffer->data(),
                     job->chunk_bytes());
    job->stream.reset();
  }
  out.manifest.checksums = core::stream_checksums({out.buffer->data(), out.manifest.total_bytes},
                                                  out.manifest.chunk_bytes);
  if (Status s = out.manifest.validate(); !s.is_ok()) return job->done(s.with_context(job->what()));
  out.stats = std::move(job->stats);
  for (std::size_t i = 0; i < out.stats.bytes_per_source.size(); ++i) {
    if (i < job->plan->holders.size() && job->plan->holders[i].distance == 0)
      out.same_host_bytes += out.stats.bytes_per_source[i];
  }
  if (job->share) out.same_host_bytes += job->share->same_host_bytes;
  out.version_bytes = job->plan->manifest.total_bytes;
  out.whole_chunks = job->whole_chunks;
  job->done(std::move(out));
}

void read_pieces(const std::shared_ptr<ShardJob>& job, const std::vector<std::size_t>& pieces,
                 std::optional<std::uint32_t> only);

// The declared path, after a read of `pieces`: checks every stream chunk they touched; those
// that fail are read again from the next holder in turn.
void check_pieces(const std::shared_ptr<ShardJob>& job, const std::vector<std::size_t>& pieces) {
  const std::uint64_t cb = job->chunk_bytes();
  std::vector<bool> touched(job->stream_chunks(), false);
  for (std::size_t i : pieces) {
    const auto& p = job->shard.pieces[i];
    for (std::uint64_t c = p.dst_offset / cb; c * cb < p.dst_offset + p.bytes; ++c)
      touched[c] = true;
  }
  std::vector<std::uint64_t> bad;  // ascending
  for (std::uint64_t c = 0; c < touched.size(); ++c) {
    if (!touched[c]) continue;
    const std::uint64_t n = std::min(cb, job->shard.bytes - c * cb);
    const std::uint8_t* at = job->stream->data() + c * cb;
    const bool match = job->declared_digests
                           ? core::chunk_digest(at, n) == (*job->declared_digests)[c]
                           : core::chunk_checksum(at, n) == (*job->declared)[c];
    if (!match) bad.push_back(c);
  }
  if (bad.empty()) return deliver(job);
  job->stats.checksum_failures += static_cast<std::uint32_t>(bad.size());
  if (job->next_holder >= job->plan->holders.size()) {
    return job->done(core::data_loss(
        job->what() + ": assembled chunk " + std::to_string(bad.front()) + " (of " +
        std::to_string(bad.size()) + " failing) matched its signed checksum from no holder"));
  }
  const auto holder = static_cast<std::uint32_t>(job->next_holder++);
  core::log::warn(
      "{}: {} assembled chunk(s) failed their checksums (first: {}); reading them "
      "again from {}",
      job->what(), bad.size(), bad.front(), job->plan->holders[holder].holder_id);
  std::vector<std::size_t> again;
  for (std::size_t i = 0; i < job->shard.pieces.size(); ++i) {
    const auto& p = job->shard.pieces[i];
    const std::uint64_t first = p.dst_offset / cb, last = (p.dst_offset + p.bytes - 1) / cb;
    auto it = std::lower_bound(bad.begin(), bad.end(), first);
    if (it != bad.end() && *it <= last) again.push_back(i);
  }
  ++job->stats.retries;
  read_pieces(job, again, holder);
}

// The declared path: reads `pieces` (indices into shard.pieces; from holder `only` when given,
// skipping the pieces it does not hold) into the stream without checking them one by one.
void read_pieces(const std::shared_ptr<ShardJob>& job, const std::vector<std::size_t>& pieces,
                 std::optional<std::uint32_t> only) {
  const auto& m = job->plan->manifest;
  std::vector<core::ChunkRead> reads;
  reads.reserve(pieces.size());
  for (std::size_t i : pieces) {
    const auto& p = job->shard.pieces[i];
    core::ChunkRead c;
    c.src_offset = p.src_offset;
    c.dst_offset = p.dst_offset;
    c.bytes = p.bytes;
    c.sources = job->plan->chunks[p.src_offset / m.chunk_bytes].holders;
    if (only) {
      if (std::find(c.sources.begin(), c.sources.end(), *only) == c.sources.end()) continue;
      c.sources = {*only};
    }
    reads.push_back(std::move(c));
  }
  if (reads.empty()) return check_pieces(job, pieces);  // this holder has none of them
  core::ReadOptions o = job->options;
  o.verify = false;  // a piece has no checksum of its own: its assembled chunk has
  o.on_chunk = nullptr;
  job->engine->read(job->sources, std::move(reads), *job->stream, o,
                    [job, pieces](Result<core::ReadStats> r) {
                      if (!r.is_ok()) return job->done(r.status().with_context(job->what()));
                      add_stats(job->stats, *r);
                      check_pieces(job, pieces);
                    });
}

// The undeclared path: whole chunks of the version, verified as every read is, packed into one
// buffer; the shard is cut out of them.
void read_whole_chunks(const std::shared_ptr<ShardJob>& job) {
  const auto& m = job->plan->manifest;
  const auto layout = m.layout();
  std::map<std::uint64_t, std::uint64_t> slot;  // chunk index -> its place in the buffer
  for (const auto& p : job->shard.pieces)
    slot.emplace(p.src_offset / m.chunk_bytes, 0);
  std::vector<core::ChunkRead> reads;
  std::uint64_t at = 0;
  for (auto& [c, s] : slot) {
    s = at;
    core::ChunkRead r;
    r.src_offset = layout.chunk_offset(c);
    r.dst_offset = at;
    r.bytes = layout.chunk_size(c);
    r.checksum = m.checksums[c];
    if (!m.digests.empty()) r.digest = m.digests[c];
    r.sources = job->plan->chunks[c].holders;
    at += r.bytes;
    reads.push_back(std::move(r));
  }
  core::log::info(
      "{}: the actor declared no checksums for this layout: reading the {} whole "
      "chunks that hold its bytes ({} of the version's {} bytes)",
      job->what(), reads.size(), at, m.total_bytes);
  auto buf = job->engine->allocate(std::max<std::uint64_t>(at, 1), false);
  if (!buf.is_ok()) return job->done(buf.status().with_context(job->what()));
  auto chunks = std::shared_ptr<core::RegisteredBuffer>(std::move(buf).value());
  core::ReadOptions o = job->options;
  o.verify = true;
  o.on_chunk = nullptr;
  job->whole_chunks = true;
  job->engine->read(job->sources, std::move(reads), *chunks, o,
                    [job, chunks, slot = std::move(slot)](Result<core::ReadStats> r) {
                      if (!r.is_ok()) return job->done(r.status().with_context(job->what()));
                      add_stats(job->stats, *r);
                      const std::uint64_t cb = job->chunk_bytes();
                      for (const auto& p : job->shard.pieces) {
                        const std::uint64_t c = p.src_offset / cb;
                        std::memcpy(job->stream->data() + p.dst_offset,
                                    chunks->data() + slot.at(c) + (p.src_offset - c * cb), p.bytes);
                      }
                      deliver(job);
                    });
}

// Reads the pieces that the share's holders have so far, then asks again until every piece is
// here (then checks them all as the declared path does), or until the share has made no
// progress for kShareStall (then the rest is read from the whole version's holders).
constexpr core::Millis kShareFollow{5};     // between questions while the share arrives
constexpr core::Millis kShareStall{10000};  // a relay that long without a new chunk is not used
// How long a share may take to appear in the store after its version did: relays look for new
// versions every poll_ms (50 ms by default), so 20 of their polls.
constexpr core::Millis kShareAppear{1000};
void share_round(const std::shared_ptr<ShardJob>& job);

void all_pieces_from_version(const std::shared_ptr<ShardJob>& job, const std::string& why) {
  core::log::info("{}: {}; reading it from the version's holders", job->what(), why);
  read_pieces(job, every_piece(*job), std::nullopt);
}

void share_again(const std::shared_ptr<ShardJob>& job) {
  auto& sh = *job->share;
  if (core::Clock::now() - sh.progressed > (sh.appeared ? kShareStall : kShareAppear)) {
    return all_pieces_from_version(
        job,
        "its host share " + sh.model + (sh.appeared ? " made no progress" : " did not appear"));
  }
  sh.self = job;
  ShardJob* raw = job.get();
  sh.timer = sh.store.loop->after(kShareFollow, [raw] {
    auto j = std::move(raw->share->self);
    share_round(j);
  });
}

void share_round(const std::shared_ptr<ShardJob>& job) {
  ShardJob::Share& share = *job->share;
  // No actor signs a share: its manifest must be the one the version's checked manifest gives.
  share.store.plan(
      PlanRequest{share.model, job->plan->manifest.version, share.where},
      std::shared_ptr<const core::Manifest>(job->plan, &job->plan->manifest),
      [job](Result<ReadPlan> r) {
        auto& sh = *job->share;
        if (!r.is_ok() && r.status().code() == core::Code::kNotFound && !sh.appeared) {
          return share_again(job);  // no relay has started on it yet
        }
        if (!r.is_ok()) {
          return all_pieces_from_version(job, "its host share: " + r.status().to_string());
        }
        sh.appeared = true;
        auto release = [&sh, lease = r->lease_id] { sh.store.release(lease); };
        std::vector<core::ReadSource> sources;
        for (const auto& h : r->holders) {
          auto d = core::RegionDescriptor::decode(h.descriptor);
          if (!d.is_ok()) {
            release();
            return all_pieces_from_version(job,
                                           "holder " + h.holder_id + ": " + d.status().to_string());
          }
          sources.push_back({h.holder_id, std::move(d).value(), h.holder_id});
        }
        const std::uint64_t cb = r->manifest.chunk_bytes;
        // With a relay of the share on this host, only it is read from, at the pace it receives:
        // other hosts' links stay free. Without one, any holder.
        const bool local = std::any_of(r->holders.begin(), r->holders.end(),
                                       [](const ReadPlan::Holder& h) { return h.distance == 0; });
        // This host's relay may not have started on the version yet: it is waited for as a share
        // that has not appeared is.
        if (!local && core::Clock::now() - sh.started < kShareAppear) {
          release();
          return share_again(job);
        }
        std::vector<core::ChunkRead> reads;
        std::vector<std::size_t> which;
        for (std::size_t i = 0; i < sh.pieces.size(); ++i) {
          const auto& p = sh.pieces[i];
          const std::uint64_t c = p.src_offset / cb;
          if (sh.got[i] || c >= r->chunks.size() || r->chunks[c].holders.empty()) continue;
          core::ChunkRead cr;
          cr.src_offset = p.src_offset;
          cr.dst_offset = p.dst_offset;
          cr.bytes = p.bytes;
          for (std::uint32_t h : r->chunks[c].holders)
            if (!local || r->holders[h].distance == 0) cr.sources.push_back(h);
          if (cr.sources.empty()) continue;  // not on this host's relay yet
          reads.push_back(std::move(cr));
          which.push_back(i);
        }
        if (reads.empty()) {
          release();
          return share_again(job);
        }
        core::ReadOptions o = job->options;
        o.verify = false;  // checked per assembled chunk once every piece is here
        o.on_chunk = nullptr;
        auto near = std::make_shared<std::vector<bool>>();
        for (const auto& h : r->holders)
          near->push_back(h.distance == 0);
        job->engine->read(std::move(sources), std::move(reads), *job->stream, o,
                          [job, which, near, release](Result<core::ReadStats> st) {
                            release();
                            auto& state = *job->share;
                            if (!st.is_ok()) {
                              return all_pieces_from_version(
                                  job, "reading its host share: " + st.status().to_string());
                            }
                            job->stats.bytes += st->bytes;
                            job->stats.seconds += st->seconds;
                            for (std::size_t i = 0; i < st->bytes_per_source.size(); ++i)
                              if (i < near->size() && (*near)[i])
                                state.same_host_bytes += st->bytes_per_source[i];
                            for (std::size_t i : which)
                              state.got[i] = true;
                            state.left -= which.size();
                            state.progressed = core::Clock::now();
                            if (state.left > 0) return share_round(job);
                            // wrong bytes: read from the version
                            check_pieces(job, every_piece(*job));
                          });
      });
}

}  // namespace

void read_shard_via_share_async(core::TransferEngine& engine, ShareStore store,
                                const Topology& where, std::shared_ptr<const ReadPlan> plan,
                                std::vector<core::ReadSource> sources, core::ShardPlan shard,
                                core::ShardLayout layout, core::ReadOptions options,
                                std::function<void(Result<Pulled>)> done) {
  const core::Manifest& m = plan->manifest;
  const std::uint32_t host_tp = layout.host_tp_size;
  const core::ShardChecksums* declared = nullptr;
  for (const auto& sc : m.shards)
    if (host_tp > 0 && sc.tp_size == host_tp && sc.splits == shard.splits) declared = &sc;
  const bool fine_declared = core::declared_checksums(m, shard) != nullptr;
  if (!declared || !fine_declared || shard.pieces.empty()) {
    return read_shard_async(engine, std::move(plan), std::move(sources), std::move(shard),
                            std::move(layout), std::move(options), std::move(done));
  }
  core::ShardLayout coarse_layout;
  coarse_layout.tp_size = host_tp;
  coarse_layout.tp_rank = shard.tp_rank / (shard.tp_size / host_tp);
  coarse_layout.splits = core::splits_by_name(m, declared->splits);
  auto coarse = core::plan_shard(m, coarse_layout);
  auto pieces = coarse.is_ok() ? core::rebase_pieces(shard, *coarse, m.chunk_bytes)
                               : Result<std::vector<core::ShardPiece>>(coarse.status());
  if (!pieces.is_ok()) return done(pieces.status());
  auto job = start_job(engine, std::move(plan), std::move(sources), std::move(shard),
                       std::move(layout), std::move(options), std::move(done));
  if (!job) return;
  job->share = std::make_unique<ShardJob::Share>();
  auto& sh = *job->share;
  sh.store = std::move(store);
  sh.where = where;
  sh.model = core::share_model(m.model, host_tp, coarse_layout.tp_rank, declared->splits);
  sh.pieces = std::move(pieces).value();
  sh.got.assign(sh.pieces.size(), false);
  sh.left = sh.pieces.size();
  sh.started = sh.progressed = core::Clock::now();
  share_round(job);
}

void read_shard_async(core::TransferEngine& engine, std::shared_ptr<const ReadPlan> plan,
                      std::vector<core::ReadSource> sources, core::ShardPlan shard,
                      core::ShardLayout layout, core::ReadOptions options,
                      std::function<void(Result<Pulled>)> done) {
  auto job = start_job(engine, std::move(plan), std::move(sources), std::move(shard),
                       std::move(layout), std::move(options), std::move(done));
  if (!job) return;
  if (job->shard.pieces.empty()) return deliver(job);
  if (!job->declared) return read_whole_chunks(job);
  read_pieces(job, every_piece(*job), std::nullopt);
}

}  // namespace sluice::weightstore
