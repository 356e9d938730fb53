#include "weightstore/shard_read.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "core/checksum.hpp"
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
  std::unique_ptr<core::RegisteredBuffer> stream;        // the assembled shard stream
  core::ReadStats stats;                                 // summed over every read
  std::size_t next_holder = 0;                           // the declared path's retries
  bool whole_chunks = false;

  std::string what() const {
    return "shard " + std::to_string(shard.tp_rank) + "/" + std::to_string(shard.tp_size) + " of " +
           plan->manifest.model + "@" + std::to_string(plan->manifest.version);
  }
  std::uint64_t chunk_bytes() const { return plan->manifest.chunk_bytes; }
  std::uint64_t stream_chunks() const {
    return shard.bytes / chunk_bytes() + (shard.bytes % chunk_bytes() != 0 ? 1 : 0);
  }
};

void add_stats(core::ReadStats& sum, const core::ReadStats& s) {
  sum.bytes += s.bytes;
  sum.seconds += s.seconds;
  sum.retries += s.retries;
  sum.checksum_failures += s.checksum_failures;
  sum.mapped_bytes += s.mapped_bytes;
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
    if (core::chunk_checksum(job->stream->data() + c * cb, n) != (*job->declared)[c])
      bad.push_back(c);
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

}  // namespace

void read_shard_async(core::TransferEngine& engine, std::shared_ptr<const ReadPlan> plan,
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
  // At least one byte: an empty shard (all its tensors empty) still gets a buffer to hand over.
  auto buf = engine.allocate(std::max<std::uint64_t>(job->shard.bytes, 1), false);
  if (!buf.is_ok()) return job->done(buf.status().with_context(job->what()));
  job->stream = std::move(buf).value();
  if (job->shard.pieces.empty()) return deliver(job);
  if (!job->declared) return read_whole_chunks(job);
  std::vector<std::size_t> all(job->shard.pieces.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = i;
  read_pieces(job, all, std::nullopt);
}

}  // namespace sluice::weightstore
