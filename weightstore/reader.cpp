#include "weightstore/reader.hpp"

#include <algorithm>
#include <optional>

#include "core/log.hpp"
#include "weightstore/protocol.hpp"

namespace sluice::weightstore {

namespace log = core::log;
using core::Message;
using core::Result;
using core::Status;

namespace {
std::string vname(const std::string& model, std::uint64_t version) {
  return model + "@" + std::to_string(version);
}
long long ms(Millis d) {
  return static_cast<long long>(d.count());
}
}  // namespace

bool keep_listed_source(ReadPlan& plan, const std::vector<std::string>& ids) {
  if (ids.empty() || plan.chunks.empty()) return false;
  std::vector<std::uint32_t> pick(plan.chunks.size());
  for (std::size_t c = 0; c < plan.chunks.size(); ++c) {
    bool found = false;
    for (const auto& id : ids) {
      for (std::uint32_t h : plan.chunks[c].holders) {
        if (h < plan.holders.size() && plan.holders[h].holder_id == id) {
          pick[c] = h;
          found = true;
          break;
        }
      }
      if (found) break;
    }
    if (!found) return false;
  }
  for (std::size_t c = 0; c < plan.chunks.size(); ++c)
    plan.chunks[c].holders = {pick[c]};
  return true;
}

Result<std::unique_ptr<Reader>> Reader::create(core::EventLoop& loop, core::TransferEngine& engine,
                                               StoreClient& store, ReaderOptions options) {
  if (options.model.empty()) return core::invalid_argument("reader: no model name");
  if (options.serve && options.holder_id.empty()) {
    return core::invalid_argument("reader: a reader that serves needs a holder id");
  }
  if (options.request_timeout <= Millis(0) || options.drain_timeout < Millis(0) ||
      options.drain_check <= Millis(0) || options.lease_ttl <= Millis(0) ||
      options.local_check <= Millis(0)) {
    return core::invalid_argument(
        "reader: request_timeout, drain_check, lease_ttl and local_check must be positive, "
        "drain_timeout not negative");
  }
  if (options.layout) {
    SLUICE_TRY(options.layout->validate().with_context("reader " + options.model));
    if (options.serve) {
      return core::invalid_argument("reader " + options.model +
                                    ": a reader with a shard layout holds only its shard and "
                                    "cannot serve the version; set serve to false");
    }
  }
  std::unique_ptr<Reader> r(new Reader());
  if (options.layout) r->shard_ = std::make_shared<core::ShardLayout>(*options.layout);
  r->loop_ = &loop;
  r->engine_ = &engine;
  r->store_ = &store;
  r->options_ = std::move(options);
  if (r->options_.serve) {
    HolderOptions ho;
    ho.holder_id = r->options_.holder_id;
    ho.endpoint = r->options_.endpoint;
    ho.topology = r->options_.topology;
    ho.request_timeout = r->options_.request_timeout;
    ho.drain_check = r->options_.drain_check;
    ho.lease_ttl = r->options_.lease_ttl;
    ho.drain_timeout = r->options_.drain_timeout;
    ho.log_name = r->name();
    SLUICE_ASSIGN_OR_RETURN(r->holder_, Holder::create(loop, store, std::move(ho)));
  }
  return r;
}

Reader::~Reader() {
  alive_.reset();
  if (holder_ && current_) {
    // The holder unpublishes it without waiting (a destructor may run inside a loop callback):
    // the store stops naming this copy, and readers still on it fail over when its memory goes.
    log::warn("{}: destroyed without close(); {} unpublished without waiting for its readers",
              name(), vname(options_.model, current_->manifest.version));
  }
}

std::string Reader::name() const {
  return "reader " + (options_.holder_id.empty() ? options_.model : options_.holder_id);
}

std::uint64_t Reader::current_version() const {
  return current_ ? current_->manifest.version : 0;
}

std::uint64_t Reader::staged_version() const {
  return staged_ ? staged_->manifest.version : 0;
}

std::uint64_t Reader::newest_held() const {
  return std::max(current_version(), staged_version());
}

const core::Manifest* Reader::current_manifest() const {
  return current_ ? &current_->manifest : nullptr;
}

const core::Manifest* Reader::staged_manifest() const {
  return staged_ ? &staged_->manifest : nullptr;
}

std::span<const std::uint8_t> Reader::current_bytes() const {
  if (!current_) return {};
  return {current_->buffer->data(), current_->manifest.total_bytes};
}

Result<std::span<const std::uint8_t>> Reader::current_tensor(const std::string& tensor) const {
  if (!current_) return core::not_found(name() + ": no current version");
  for (const auto& t : current_->manifest.tensors) {
    if (t.name == tensor)
      return std::span<const std::uint8_t>(current_->buffer->data() + t.offset, t.bytes);
  }
  return core::not_found(name() + ": " + vname(options_.model, current_->manifest.version) +
                         " has no tensor '" + tensor + "'");
}

void Reader::pull_latest(Done done) {
  waiters_.push_back(std::move(done));
  if (busy_) return;  // joins the pull in flight
  busy_ = true;
  std::weak_ptr<bool> alive = alive_;
  LatestRequest ask{options_.model, newest_held(), 0};
  if (options_.latest_wait > Millis(0)) {
    Millis wait = options_.latest_wait;
    // A version whose nearby plan was declined a moment ago is asked about again only once
    // local_check has passed: until then the question waits for a newer one.
    auto since = Clock::now() - local_declined_at_;
    if (local_declined_version_ > ask.after && since < options_.local_check) {
      ask.after = local_declined_version_;
      wait = std::min(wait, std::chrono::ceil<Millis>(options_.local_check - since));
    }
    ask.wait_ms = static_cast<std::uint64_t>(wait.count());
  }
  store_->latest_async(ask, options_.request_timeout, [this, alive](Result<Latest> reply) {
    if (alive.expired()) return;
    if (!reply.is_ok()) {
      return finish(reply.status().with_context(name() + ": latest " + options_.model));
    }
    const std::uint64_t* latest = &reply->version;
    // Nothing newer than what is here already: no bytes to move.
    if (*latest <= newest_held()) return finish(newest_held());
    // A joiner's first version (local_wait_first false) and a restricted pull never wait.
    const bool no_wait = restricted() || (!options_.local_wait_first && newest_held() == 0);
    Scope scope = no_wait ? Scope::kAny : wait_scope(*latest);
    if (scope != Scope::kAny && *latest == local_declined_version_ &&
        Clock::now() - local_declined_at_ < options_.local_check) {
      return finish(newest_held());  // asked for a plan of it a moment ago
    }
    fetch(*latest, scope);
  });
}

Reader::Scope Reader::wait_scope(std::uint64_t latest) {
  const bool host = !options_.topology.host.empty();
  const bool dc = !options_.topology.datacenter.empty();
  if (options_.local_wait <= Millis(0) || (!host && !dc)) return Scope::kAny;
  if (latest != local_wait_version_) {
    local_wait_version_ = latest;
    local_wait_since_ = Clock::now();
  }
  auto waited = Clock::now() - local_wait_since_;
  if (host && waited < options_.local_wait) return Scope::kHost;
  if (dc && waited < options_.local_wait * (host ? 2 : 1)) return Scope::kDatacenter;
  return Scope::kAny;
}

void Reader::pull_version(std::uint64_t version, Done done) {
  if (version == 0) return pull_latest(std::move(done));
  if (busy_) {
    // Once the pull in flight ends (finish() hands its waiters over before calling them, so a
    // waiter may start the next pull).
    waiters_.push_back([this, version, done = std::move(done)](Result<std::uint64_t>) mutable {
      pull_version(version, std::move(done));
    });
    return;
  }
  if (version == current_version() || version == staged_version()) {
    std::weak_ptr<bool> alive = alive_;
    loop_->post([alive, version, done = std::move(done)] {
      if (!alive.expired()) done(version);
    });
    return;
  }
  busy_ = true;
  waiters_.push_back(std::move(done));
  fetch(version);
}

Result<std::uint64_t> Reader::pull(std::uint64_t version, Millis timeout) {
  auto deadline = Clock::now() + timeout;
  auto left = [deadline] {
    return std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
  };
  if (busy_ && !loop_->run_until([this] { return !busy_; }, timeout)) {
    return core::timeout_error(name() + ": the pull in flight did not end within " +
                               std::to_string(ms(timeout)) + " ms");
  }
  // Busy from here on: pull_latest() called meanwhile (from a timer) joins this pull.
  busy_ = true;
  if (version == 0) {
    auto latest = store_->latest(options_.model);  // runs the loop
    if (!latest.is_ok()) {
      Status s = latest.status().with_context(name() + ": latest " + options_.model);
      finish(s);
      return s;
    }
    version = *latest;
  }
  if (version == current_version() || version == staged_version()) {
    finish(version);
    return version;
  }
  std::optional<Result<std::uint64_t>> out;
  waiters_.push_back([&out](Result<std::uint64_t> r) { out.emplace(std::move(r)); });
  fetch(version);
  if (!loop_->run_until([&out] { return out.has_value(); }, left())) {
    // Given up on: the read still ends on its own timeouts, and its result is then ignored.
    ++pull_generation_;
    finish(core::timeout_error(name() + ": pull " + vname(options_.model, version) +
                               " not done within " + std::to_string(ms(timeout)) + " ms"));
  }
  return std::move(*out);
}

namespace {
// For pull_async's `accept`: only holders in the reader's datacenter (distance 2 or less) as
// each chunk's sources; false when some chunk has none there.
bool keep_same_datacenter_sources(ReadPlan& plan) {
  if (plan.chunks.empty()) return false;
  for (auto& c : plan.chunks) {
    std::erase_if(c.holders, [&](std::uint32_t h) {
      return h >= plan.holders.size() || plan.holders[h].distance > 2;
    });
    if (c.holders.empty()) return false;
  }
  return true;
}
}  // namespace

void Reader::fetch(std::uint64_t version, Scope scope) {
  const bool local_only = scope != Scope::kAny;
  std::uint64_t generation = ++pull_generation_;
  std::weak_ptr<bool> alive = alive_;
  log::debug("{}: pulling {} in the background", name(), vname(options_.model, version));
  pull_async(
      *engine_, *store_, options_.model, version, options_.topology, options_.read,
      [this, alive, generation, version, local_only](Result<Pulled> pulled) {
        if (alive.expired() || generation != pull_generation_) return;
        if (!pulled.is_ok() && local_only &&
            pulled.status().code() == core::Code::kFailedPrecondition) {
          // Not near enough yet: nothing new now.
          local_declined_version_ = version;
          local_declined_at_ = Clock::now();
          return finish(newest_held());
        }
        if (!pulled.is_ok()) {
          // The current and staged versions stay as they were.
          return finish(
              pulled.status().with_context(name() + ": pull " + vname(options_.model, version)));
        }
        std::uint64_t got = pulled->manifest.version;
        if (got != current_version()) {
          // A staged version not swapped in yet is replaced: it was never served, so it
          // is freed at once.
          staged_ =
              std::make_unique<Held>(Held{std::move(pulled->manifest), std::move(pulled->buffer)});
          last_stats_ = pulled->stats;
          last_same_host_bytes_ = pulled->same_host_bytes;
          last_version_bytes_ = shard_ ? pulled->version_bytes : staged_->manifest.total_bytes;
          last_whole_chunks_ = pulled->whole_chunks;
          log::info("{}: staged {} ({} bytes in {:.3f} s)", name(), vname(options_.model, got),
                    staged_->manifest.total_bytes, pulled->stats.seconds);
        }
        finish(got);
      },
      accept_for(scope), options_.lease_renew, shard_);
}

bool Reader::restricted() const {
  return !options_.only_from.empty() && (!options_.only_from_first || newest_held() == 0);
}

std::function<bool(ReadPlan&)> Reader::accept_for(Scope scope) const {
  if (restricted()) {
    return [ids = options_.only_from](ReadPlan& plan) { return keep_listed_source(plan, ids); };
  }
  if (scope == Scope::kHost) return keep_same_host_sources;
  if (scope == Scope::kDatacenter) return keep_same_datacenter_sources;
  if (!options_.local_wait_first && newest_held() == 0 && !options_.topology.host.empty()) {
    // A joiner's first version: from its host's copy when that is complete (no link to cross),
    // else from every holder at once; never a wait.
    return [](ReadPlan& plan) {
      ReadPlan local = plan;
      if (keep_same_host_sources(local)) plan = std::move(local);
      return true;
    };
  }
  return nullptr;
}

void Reader::finish(Result<std::uint64_t> result) {
  busy_ = false;
  // Nothing committed yet is what every reader sees before the first publish: not worth a warning.
  if (!result.is_ok() && result.status().code() == core::Code::kNotFound) {
    log::debug("{}", result.status().to_string());
  } else if (!result.is_ok()) {
    log::warn("{}", result.status().to_string());
  }
  // Moved out first: a callback may start the next pull, which gathers its own waiters.
  std::vector<Done> waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiters)
    if (w) w(result);
}

Result<std::uint64_t> Reader::swap() {
  if (!staged_) return core::failed_precondition(name() + ": nothing staged to swap in");
  std::unique_ptr<Held> old = std::move(current_);
  current_ = std::move(staged_);
  std::uint64_t v = current_->manifest.version;
  log::info("{}: now on {}{}", name(), vname(options_.model, v),
            old ? " (was " + std::to_string(old->manifest.version) + ")" : std::string());
  if (!holder_) return v;  // not serving: `old` is freed on return, never named to anyone
  // Registered before the old copy is unpublished, on the same socket and so in this order:
  // the store never sees this holder with neither version when peers ask for a plan.
  // Every chunk of the copy was verified as it was pulled: same-user readers on this host may
  // check it by checksum alone.
  holder_->serve(current_->manifest, current_->buffer->verified_descriptor().encode());
  if (old) holder_->retire(old->manifest.version, std::move(old->buffer));
  return v;
}

bool Reader::serving() const {
  return holder_ && current_ && holder_->registered(current_->manifest.version);
}

std::size_t Reader::retiring() const {
  return holder_ ? holder_->retiring() : 0;
}

void Reader::heartbeat() {
  if (holder_) holder_->heartbeat();
}

Status Reader::close() {
  // A pull in flight is given up on; its callers hear so.
  if (busy_) {
    ++pull_generation_;
    finish(core::cancelled(name() + ": closed while pulling"));
  }
  staged_.reset();
  std::unique_ptr<Held> cur = std::move(current_);
  if (!holder_) return {};
  if (cur) holder_->retire(cur->manifest.version, std::move(cur->buffer));
  // Waits at most drain_timeout (plus a request and two checks; 30 s without one); what has not
  // drained by then is freed without the store's word, and said so.
  return holder_->close();
}

}  // namespace sluice::weightstore
