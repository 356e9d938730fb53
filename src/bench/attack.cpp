#include "bench/attack.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "bench/attack_internal.hpp"
#include "core/log.hpp"
#include "launch/job.hpp"
#include "rollout/protocol.hpp"
#include "weightstore/client.hpp"
#include "weightstore/protocol.hpp"
#include "wire/messaging.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using core::Millis;
using core::Result;
using core::Status;

namespace attack {

namespace {

using Message = core::Message;

// One client per (identity, server), made on first use.
class Clients {
 public:
  Clients(core::EventLoop& loop, const Target& t) : loop_(loop), t_(t) {}

  Result<core::Client*> as(const std::string& identity, const std::string& server_role) {
    const std::string key = identity + "@" + server_role;
    auto it = clients_.find(key);
    if (it != clients_.end()) return it->second.get();
    SLUICE_ASSIGN_OR_RETURN(core::Security own, member_security(t_, identity));
    SLUICE_ASSIGN_OR_RETURN(core::Security sec, own.for_server(server_role));
    const std::string& ep = server_role == core::kRoleManager ? t_.manager : t_.store;
    SLUICE_ASSIGN_OR_RETURN(auto c, core::Client::create(loop_, ep, sec));
    core::Client* raw = c.get();
    clients_.emplace(key, std::move(c));
    return raw;
  }

 private:
  core::EventLoop& loop_;
  const Target& t_;
  std::map<std::string, std::unique_ptr<core::Client>> clients_;
};

// How one kind of sender's request is judged, for each way it can end: an ok reply, no answer
// (a time-out) or an error reply. Each case's verdict, and the words around what came back (the
// reply's type, or the error in brief).
struct Judging {
  struct Case {
    Verdict verdict;
    const char* before;
    const char* after;
  };
  Case ok, silent, error;
};

Attempt judge(std::string name, std::string tried, const Result<Message>& r, const Judging& j) {
  const Judging::Case& c = r.is_ok()                                   ? j.ok
                           : r.status().code() == core::Code::kTimeout ? j.silent
                                                                       : j.error;
  const std::string got = r.is_ok() ? r->type : brief(r.status());
  return {std::move(name), std::move(tried), c.before + got + c.after, c.verdict};
}

// A member asked for what it may not do: any error reply is a refusal; an ok reply is a breach;
// silence is a breach too (a server that stalls on a request: every wait has a time-out, and a
// request must get its answer).
constexpr Judging kMember{{Verdict::kBreach, "accepted (", ")"},
                          {Verdict::kBreach, "no answer: ", ""},
                          {Verdict::kRefused, "", ""}};

// Someone outside the job: only silence is right (the handshake never completes, nothing reaches
// a handler); any reply, even an error, means a stranger got through.
constexpr Judging kStranger{{Verdict::kBreach, "answered (", ")"},
                            {Verdict::kRefused, "no reply: the handshake never completed (", ")"},
                            {Verdict::kBreach, "reached a handler: ", ""}};

Attempt member_attempt(std::string name, std::string tried, const Result<Message>& r) {
  return judge(std::move(name), std::move(tried), r, kMember);
}

Attempt stranger_attempt(std::string name, std::string tried, const Result<Message>& r) {
  return judge(std::move(name), std::move(tried), r, kStranger);
}

class Attacker {
 public:
  Attacker(core::EventLoop& loop, const Target& t, const AttackArgs& args, Report& report)
      : loop_(loop), t_(t), args_(args), report_(report), clients_(loop, t) {}

  Status start() {
    SLUICE_ASSIGN_OR_RETURN(operator_sec_, member_security(t_, core::kRoleOperator));
    SLUICE_ASSIGN_OR_RETURN(operator_store_,
                            weightstore::StoreClient::create(loop_, t_.store, operator_sec_,
                                                             weightstore::kStoreRequestTimeout));
    return {};
  }

  // The store's newest version; unavailable when the store does not answer (not a running job).
  Result<std::uint64_t> latest() { return operator_store_->latest(t_.model); }

  Result<weightstore::ReadPlan> plan() {
    return operator_store_->plan(t_.model, 0, weightstore::Topology{});
  }
  void release(std::uint64_t lease) { operator_store_->release(lease).ignore(); }
  weightstore::StoreClient& operator_store() { return *operator_store_; }
  // A non-actor member that makes no version: a relay when the job has one.
  std::string relay_key() const {
    if (!t_.relays.empty()) return t_.relays.front();
    if (!t_.rollouts.empty()) return t_.rollouts.front();
    return core::kRoleOperator;
  }

  void strangers();
  void versions();
  void owners_and_leases();
  void identities();
  void manager_roles();
  void foreign_finish();
  void oversized();
  void file_modes();

 private:
  Millis wait() const { return Millis(args_.wait_ms); }
  Millis member_wait() const { return Millis(std::max<std::uint32_t>(args_.wait_ms, 5000)); }
  Result<Message> call_as(const std::string& identity, const std::string& server_role, Message m) {
    SLUICE_ASSIGN_OR_RETURN(core::Client * c, clients_.as(identity, server_role));
    return c->call(std::move(m), member_wait());
  }

  core::EventLoop& loop_;
  const Target& t_;
  const AttackArgs& args_;
  Report& report_;
  Clients clients_;
  core::Security operator_sec_;
  std::unique_ptr<weightstore::StoreClient> operator_store_;
};

void Attacker::strangers() {
  struct Server {
    const char* role;
    std::string endpoint;
    Message request;
  };
  const Server servers[] = {
      {core::kRoleWeightstore, t_.store,
       weightstore::encode(weightstore::LatestRequest{t_.model, 0, 0})},
      {core::kRoleManager, t_.manager, rollout::encode(rollout::StatusRequest{})},
  };
  for (const auto& s : servers) {
    const std::string what = fmt::format("{} {}", s.role, s.endpoint);
    // A fresh CURVE key pair that the members file does not list, knowing the server's key.
    if (!t_.curve || !core::curve_available()) {
      report_.skip("stranger-curve " + what, "the job runs without CURVE (auth plain)");
    } else {
      auto keys = core::make_key_pair();
      core::Security sec;
      sec.identity = "stranger";
      if (keys.is_ok()) sec.keys = *keys;
      sec.members = t_.members;
      auto to = sec.for_server(s.role);
      Result<Message> r = core::internal_error("no client");
      if (keys.is_ok() && to.is_ok()) {
        auto c = core::Client::create(loop_, s.endpoint, *to);
        if (c.is_ok()) r = (*c)->call(s.request, wait());
      }
      report_.add(stranger_attempt("stranger-curve " + what,
                                   s.request.type + " with a fresh CURVE key not in the members",
                                   r));
    }
    // No CURVE at all: a plain ZeroMQ client.
    auto c = core::Client::create(loop_, s.endpoint, core::Security::plain());
    Result<Message> r = c.is_ok() ? (*c)->call(s.request, wait()) : Result<Message>(c.status());
    Attempt a = stranger_attempt("stranger-plain " + what,
                                 s.request.type + " from a plain ZeroMQ client (no CURVE)", r);
    if (!t_.curve && a.verdict == Verdict::kBreach) {
      a.got += " (the job runs with auth plain: anyone who reaches the port drives it)";
    }
    report_.add(std::move(a));
  }
}

void Attacker::versions() {
  const std::string who = relay_key();
  auto p = plan();
  if (!p.is_ok() || p->holders.empty()) {
    for (const char* n : {"relay-new-version", "relay-forged-latest", "relay-huge-version"})
      report_.skip(n, "no read plan of the newest version: " +
                          (p.is_ok() ? std::string("no holders") : brief(p.status())));
    return;
  }
  weightstore::ReadPlan rp = std::move(p).value();
  release(rp.lease_id);
  const core::Manifest& newest = rp.manifest;
  auto registration = [&](core::Manifest m) {
    weightstore::HolderRegistration r;
    r.holder_id = who;  // its own holder id: only what the manifest says is forged
    r.endpoint = "tcp://127.0.0.1:9";
    r.descriptor = rp.holders.front().descriptor;
    r.manifest = std::move(m);
    return weightstore::encode(r);
  };
  auto play = [&](const std::string& name, const std::string& tried, core::Manifest m) {
    report_.add(member_attempt(name, fmt::format("{} as {}: {}", "store.register", who, tried),
                               call_as(who, core::kRoleWeightstore, registration(std::move(m)))));
  };
  const std::uint64_t v = newest.version;
  core::Manifest next = newest;
  next.version = v + 1;
  play("relay-new-version",
       fmt::format("version {} (the newest is {}), the newest's signature", v + 1, v), next);
  core::Manifest unsigned_next = next;
  unsigned_next.signature.clear();
  play("relay-new-version-unsigned", fmt::format("version {} without a signature", v + 1),
       unsigned_next);
  core::Manifest forged = newest;
  if (!forged.checksums.empty()) forged.checksums[0] ^= 0x5a5a5a5a5a5a5a5aull;
  play("relay-forged-latest",
       fmt::format("version {} with chunk 0's checksum changed, its signature kept", v), forged);
  forged.signature.clear();
  play("relay-forged-latest-unsigned",
       fmt::format("version {} with chunk 0's checksum changed, unsigned", v), forged);
  // The digest is what readers trust: one changed under the actor's signature.
  core::Manifest forged_digest = newest;
  if (!forged_digest.digests.empty()) {
    forged_digest.digests[0].bytes[0] ^= 0x01;
    play("relay-forged-digest",
         fmt::format("version {} with chunk 0's SHA-256 digest changed, its signature kept", v),
         forged_digest);
  } else {
    report_.skip("relay-forged-digest", "the newest version carries no digests (plain mode)");
  }
  core::Manifest huge = newest;
  huge.version = 1ull << 60;
  play("relay-huge-version", "version 2^60 with the newest's signature", huge);
  huge.version = v + (1ull << 21);
  play("relay-far-version",
       fmt::format("version {} (2^21 ahead), the newest's signature", huge.version), huge);
  // Ids that name the caller, taken from the body: another holder's copy (the actor's, or whoever
  // holds the newest version besides this key), another relay's place in the chain.
  std::string other;
  for (const auto& h : rp.holders)
    if (h.holder_id != who && other.empty()) other = h.holder_id;
  if (other.empty()) {
    report_.skip("holder-as-another", "the newest version has no holder but " + who);
  } else {
    weightstore::Unpublish unpublish;
    unpublish.holder_id = other;
    unpublish.model = t_.model;
    unpublish.version = v;
    report_.add(member_attempt(
        "unpublish-another-copy",
        fmt::format("store.unpublish as {} of {}'s copy of version {}", who, other, v),
        call_as(who, core::kRoleWeightstore, weightstore::encode(unpublish))));
    weightstore::AddChunks add;
    add.holder_id = other;
    add.model = t_.model;
    add.version = v;
    add.chunks = {0};
    report_.add(member_attempt("add-chunks-for-another",
                               fmt::format("store.add_chunks as {} for {}", who, other),
                               call_as(who, core::kRoleWeightstore, weightstore::encode(add))));
    report_.add(member_attempt(
        "heartbeat-for-another", fmt::format("store.heartbeat as {} for {}", who, other),
        call_as(who, core::kRoleWeightstore, weightstore::encode(weightstore::Heartbeat{other}))));
  }
  if (!t_.relays.empty()) {
    const std::string relay = t_.relays.front();
    const std::string posed = t_.relays.size() > 1 ? t_.relays[1] : "relay-forged";
    weightstore::JoinRelay join;
    join.relay_id = posed;
    report_.add(member_attempt("join-as-another-relay",
                               fmt::format("store.join_relay as {} with relay_id {}", relay, posed),
                               call_as(relay, core::kRoleWeightstore, weightstore::encode(join))));
    weightstore::ChainSourceRequest source;
    source.model = t_.model;
    source.version = v;
    source.relay_id = posed;
    report_.add(
        member_attempt("chain-source-as-another-relay",
                       fmt::format("store.chain_source as {} with relay_id {}", relay, posed),
                       call_as(relay, core::kRoleWeightstore, weightstore::encode(source))));
  }
  // Making a manifest at all is the actor's.
  report_.add(member_attempt(
      "relay-put-manifest", fmt::format("store.put_manifest as {}: version {}", who, v + 1),
      call_as(who, core::kRoleWeightstore, weightstore::encode(weightstore::PutManifest{next}))));
}

void Attacker::owners_and_leases() {
  auto v = latest();
  if (!v.is_ok() || *v == 0) {
    report_.skip("pin-as-another",
                 "no newest version: " + (v.is_ok() ? std::string("none yet") : brief(v.status())));
    return;
  }
  // Pins: a rollout may pin for itself; another's owner (the actor's) is refused.
  if (t_.rollouts.empty()) {
    report_.skip("pin-as-another", "the run folder has no rollout key");
  } else {
    const std::string who = t_.rollouts.front();
    weightstore::Pin pin;
    pin.model = t_.model;
    pin.version = *v;
    pin.owner = core::kRoleActor;
    report_.add(member_attempt("pin-as-another",
                               fmt::format("store.pin as {} with owner actor", who),
                               call_as(who, core::kRoleWeightstore, weightstore::encode(pin))));
    weightstore::Unpin unpin;
    static_cast<weightstore::PinRef&>(unpin) = pin;
    report_.add(member_attempt("unpin-as-another",
                               fmt::format("store.unpin as {} with owner actor", who),
                               call_as(who, core::kRoleWeightstore, weightstore::encode(unpin))));
  }
  if (!t_.relays.empty()) {
    weightstore::Pin pin;
    pin.model = t_.model;
    pin.version = *v;
    pin.owner = t_.relays.front();
    report_.add(member_attempt(
        "relay-pin", fmt::format("store.pin as {} (relays do not pin)", t_.relays.front()),
        call_as(t_.relays.front(), core::kRoleWeightstore, weightstore::encode(pin))));
  }
  // Leases: the operator takes one; another member renews and releases it.
  auto p = plan();
  if (!p.is_ok()) {
    report_.skip("renew-another-lease", "no read plan: " + brief(p.status()));
    return;
  }
  const std::uint64_t lease = p->lease_id;
  const std::string thief = relay_key();
  const std::pair<const char*, Message> tries[] = {
      {"renew", weightstore::encode(weightstore::Renew{{lease}})},
      {"release", weightstore::encode(weightstore::Release{{lease}})}};
  for (const auto& [verb, request] : tries) {
    report_.add(
        member_attempt(fmt::format("{}-another-lease", verb),
                       fmt::format("store.{} as {} of the operator's lease {}", verb, thief, lease),
                       call_as(thief, core::kRoleWeightstore, request)));
  }
  // The leases just below ours are the readers' (relays, rollouts, the actor): the operator may
  // release none of them.
  std::uint64_t released = 0, refused = 0, unknown = 0;
  std::string first_refusal;
  const std::uint64_t from = lease > 33 ? lease - 32 : 1;
  for (std::uint64_t id = from; id < lease; ++id) {
    weightstore::Release r;
    r.lease_id = id;
    auto reply = call_as(core::kRoleOperator, core::kRoleWeightstore, weightstore::encode(r));
    if (reply.is_ok()) {
      ++released;
    } else if (reply.status().code() == core::Code::kNotFound) {
      ++unknown;
    } else {
      ++refused;
      if (first_refusal.empty()) first_refusal = brief(reply.status());
    }
  }
  Attempt sweep{"release-readers-leases",
                fmt::format("store.release as operator of leases {}..{}", from, lease - 1),
                fmt::format("{} refused, {} not active, {} released{}", refused, unknown, released,
                            first_refusal.empty() ? "" : " (" + first_refusal + ")"),
                released > 0 ? Verdict::kBreach : Verdict::kRefused};
  report_.add(std::move(sweep));
  release(lease);
}

// Holder ids bound to identities, and the caps on what one identity may hold.
void Attacker::identities() {
  if (t_.rollouts.empty()) {
    report_.skip("squat-holder-id", "the run folder has no rollout key");
    return;
  }
  const std::string who = t_.rollouts.front();
  auto p = plan();
  if (!p.is_ok() || p->holders.empty()) {
    report_.skip("squat-holder-id",
                 "no read plan of the newest version: " +
                     (p.is_ok() ? std::string("no holders") : brief(p.status())));
    return;
  }
  weightstore::ReadPlan rp = std::move(p).value();
  release(rp.lease_id);
  const std::uint64_t v = rp.manifest.version;
  // Ids another identity would hold under, that no live holder has now: what a squatter takes
  // while their holder is down (or before it comes), so that its registration then fails.
  const std::string victim = t_.relays.empty() ? std::string(core::kRoleActor) : t_.relays.front();
  const std::string squatted = victim + "-squat";
  weightstore::HolderRegistration r;
  r.holder_id = squatted;
  r.endpoint = "tcp://127.0.0.1:9";
  r.descriptor = rp.holders.front().descriptor;
  r.manifest = rp.manifest;
  report_.add(member_attempt(
      "squat-holder-id",
      fmt::format("store.register as {} under {}'s id {} (version {}, its signed manifest)", who,
                  victim, squatted, v),
      call_as(who, core::kRoleWeightstore, weightstore::encode(r))));
  if (v > 1) {
    weightstore::DeltaRegistration d;
    d.holder_id = squatted;
    d.endpoint = r.endpoint;
    d.descriptor = r.descriptor;
    d.delta = {t_.model, v - 1, v, 4096, 4096, {0}};
    report_.add(
        member_attempt("delta-as-another",
                       fmt::format("store.register_delta as {} under {}'s id {}: a bogus {}->{}",
                                   who, victim, squatted, v - 1, v),
                       call_as(who, core::kRoleWeightstore, weightstore::encode(d))));
  }
  // A lease flood: plans as one rollout until the store refuses, then every lease released (the
  // real rollout of that identity reads under the same cap).
  constexpr int kMaxTries = 4096;
  std::vector<std::uint64_t> taken;
  std::string stopped;
  bool capped = false;
  for (int i = 0; i < kMaxTries && stopped.empty(); ++i) {
    auto reply = call_as(who, core::kRoleWeightstore,
                         weightstore::encode(weightstore::PlanRequest{t_.model, 0, {}}));
    auto got = reply.is_ok() ? weightstore::decode_plan(*reply)
                             : Result<weightstore::ReadPlan>(reply.status());
    if (got.is_ok())
      taken.push_back(got->lease_id);
    else
      stopped = brief(got.status()), capped = got.status().code() == core::Code::kResourceExhausted;
  }
  for (auto id : taken) {
    call_as(who, core::kRoleWeightstore, weightstore::encode(weightstore::Release{{id}})).ignore();
  }
  report_.add({"lease-flood",
               fmt::format("store.plan as {} without releasing, up to {} times", who, kMaxTries),
               fmt::format("{} leases granted, then {}", taken.size(),
                           stopped.empty() ? std::string("never refused") : stopped),
               capped ? Verdict::kRefused : Verdict::kBreach});
}

void Attacker::manager_roles() {
  if (t_.rollouts.empty()) {
    report_.skip("rollout-collect", "the run folder has no rollout key");
    return;
  }
  const std::string who = t_.rollouts.front();
  rollout::CollectRequest collect;
  collect.max = 1;
  report_.add(member_attempt("rollout-collect", fmt::format("mgr.collect as {} (the actor's)", who),
                             call_as(who, core::kRoleManager, rollout::encode(collect))));
  rollout::PublishedRequest published;
  published.version = 1ull << 40;
  report_.add(member_attempt("rollout-published",
                             fmt::format("mgr.published as {}: version 2^40", who),
                             call_as(who, core::kRoleManager, rollout::encode(published))));
  // Reporting as another rollout: its id from the body, never the caller's own.
  const std::string other = t_.rollouts.size() > 1 ? t_.rollouts[1] : "rollout-forged";
  rollout::ReportRequest as_other;
  as_other.id = other;
  as_other.incarnation = "attack";
  report_.add(member_attempt("report-as-another",
                             fmt::format("mgr.report as {} with id {}", who, other),
                             call_as(who, core::kRoleManager, rollout::encode(as_other))));
  if (!t_.relays.empty()) {
    rollout::ReportRequest as_relay;
    as_relay.id = t_.relays.front();
    report_.add(member_attempt(
        "relay-report",
        fmt::format("mgr.report as {} (reports are the rollouts')", t_.relays.front()),
        call_as(t_.relays.front(), core::kRoleManager, rollout::encode(as_relay))));
  }
  // A KV reference travels inside a sequence state a rollout exports. This one names another
  // rollout as its source and claims more bytes than its shape: the manager must refuse the whole
  // report before it changes anything (so reporting under the live rollout's own id is harmless).
  rollout::SequenceState s;
  s.trajectory_id = "p0/0";
  s.prompt_id = "p0";
  s.prompt_tokens = {1, 2, 3};
  rollout::KvRef ref;
  ref.version = 1;
  ref.layers = 1;
  ref.width = 1;
  ref.positions = 1;
  ref.bytes = 1ull << 40;  // the shape holds 8 bytes
  ref.region = std::string(64, 'x');
  ref.source = t_.rollouts.size() > 1 ? t_.rollouts[1] : "rollout-forged";
  ref.destination = who;
  s.kv_ref = ref;
  rollout::ReportRequest kv;
  kv.id = who;
  kv.exported.push_back(std::move(s));
  report_.add(member_attempt(
      "forged-kv-ref",
      fmt::format("mgr.report as {}: an exported sequence whose kv_ref names {} and claims 2^40 "
                  "bytes of a region that is not a descriptor",
                  who, ref.source),
      call_as(who, core::kRoleManager, rollout::encode(kv))));
  report_.skip(
      "forged-kv-ref-read",
      "a well-formed reference is read only by a rollout the manager moves the sequence to "
      "(a repack move it plans itself), which an outsider cannot make happen; the reader's "
      "checks (owner and sequence in the buffer's header, destination) are tests/rollout/"
      "kv_move_test.cpp's");
}

// Each rollout, under its own key, reports the same trajectory finished, with made-up tokens: the
// newest prompt's first member, which runs on one rollout at most (or on none). A report counts
// only for what the manager assigned to its sender, so every other sender's finish must be
// refused (the manager's `foreign_refused`), or counted as a duplicate when it had finished
// already: at most one of them may count.
void Attacker::foreign_finish() {
  const char* name = "finish-another-rollouts-trajectory";
  if (t_.rollouts.size() < 2) {
    report_.skip(name, "the job has fewer than two rollouts");
    return;
  }
  auto status = [&]() -> Result<nlohmann::json> {
    SLUICE_ASSIGN_OR_RETURN(Message m, call_as(core::kRoleOperator, core::kRoleManager,
                                               Message(rollout::msg::kStatus)));
    return m.body;
  };
  auto before = status();
  if (!before.is_ok()) {
    report_.skip(name, "the manager's status: " + brief(before.status()));
    return;
  }
  const std::uint64_t released = before->value("released_prompts", std::uint64_t{0});
  if (released == 0) {
    report_.skip(name, "no prompt released yet");
    return;
  }
  rl::Trajectory forged;
  forged.prompt_id = fmt::format("p{}", released - 1);
  forged.id = forged.prompt_id + "/0";
  forged.versions = {before->value("latest", std::uint64_t{1})};
  forged.prompt_tokens = {1, 2, 3};
  forged.response_tokens = {4, 5, 6};
  forged.logprobs = {-0.1f, -0.1f, -0.1f};
  forged.reward = 1.0;
  std::string errors;
  for (const auto& who : t_.rollouts) {
    forged.rollout = who;
    rollout::ReportRequest q;
    q.id = who;  // itself: the id is its key's, as the manager requires
    q.finished = {forged};
    auto r = call_as(who, core::kRoleManager, rollout::encode(q));
    if (!r.is_ok()) errors += fmt::format("; {}: {}", who, brief(r.status()));
  }
  auto after = status();
  if (!after.is_ok()) {
    report_.add(Attempt{name, "mgr.report of " + forged.id + " finished, as every rollout",
                        "then the manager did not answer: " + brief(after.status()),
                        Verdict::kBreach});
    return;
  }
  auto grew = [&](const char* key) {
    return after->value(key, std::uint64_t{0}) - before->value(key, std::uint64_t{0});
  };
  const std::uint64_t refused = grew("foreign_refused") + grew("duplicates");
  const std::uint64_t senders = t_.rollouts.size();
  Attempt a{name,
            fmt::format("mgr.report of {} finished with made-up tokens, as each of {} rollouts",
                        forged.id, senders),
            fmt::format("{} refused as another's, {} duplicates{}", grew("foreign_refused"),
                        grew("duplicates"), errors),
            refused + 1 >= senders ? Verdict::kRefused : Verdict::kBreach};
  report_.add(std::move(a));
}

void Attacker::oversized() {
  // Past the messaging limit (64 MiB in all): an error reply, and the store goes on.
  Message big = weightstore::encode(weightstore::LatestRequest{t_.model, 0, 0});
  big.blobs.push_back(std::string(65u << 20, '\0'));
  auto r = call_as(core::kRoleOperator, core::kRoleWeightstore, std::move(big));
  Attempt a =
      member_attempt("oversized-message", "store.latest as operator with a 65 MiB frame", r);
  if (a.verdict == Verdict::kRefused) {
    auto after = latest();
    if (!after.is_ok()) {
      a.got += "; then the store did not answer: " + brief(after.status());
      a.verdict = Verdict::kBreach;
    }
  }
  report_.add(std::move(a));
}

void Attacker::file_modes() {
  if (!t_.curve) {
    report_.skip("key-file-modes", "the job runs with auth plain: it has no keys");
    return;
  }
  struct stat st {};
  std::vector<std::string> open;
  auto check = [&](const fs::path& p, mode_t forbidden) {
    if (::stat(p.c_str(), &st) != 0) {
      open.push_back(p.filename().string() + " unreadable");
      return;
    }
    if ((st.st_mode & forbidden) != 0 || (st.st_uid != ::getuid() && st.st_uid != 0)) {
      open.push_back(fmt::format("{} mode {:o} owner {}", p.filename().string(), st.st_mode & 0777,
                                 st.st_uid));
    }
  };
  check(t_.keys_dir, 0077);
  std::size_t files = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(t_.keys_dir, ec)) {
    if (e.path().extension() == ".key") {
      check(e.path(), 0077);
      ++files;
    }
  }
  check(core::members_file_path(t_.keys_dir), 0022);
  report_.add(Attempt{"key-file-modes",
                      fmt::format("the keys folder, its {} key files and the members file", files),
                      open.empty() ? "no other user may read a key or write any of them"
                                   : "open to others: " + fmt::format("{}", fmt::join(open, ", ")),
                      open.empty() ? Verdict::kRefused : Verdict::kBreach});
}

// The run folder of a running job, read into a Target; exit status 2 on bad input.
Result<Target> read_target(const std::string& run_dir) {
  std::error_code ec;
  if (run_dir.empty() || !fs::is_directory(run_dir, ec)) {
    return core::not_found(fmt::format("{}: no such run folder", run_dir));
  }
  if (fs::exists(fs::path(run_dir) / "summary.json", ec)) {
    return core::failed_precondition(fmt::format(
        "the job of {} has ended (it has a summary.json): attack a running job", run_dir));
  }
  SLUICE_ASSIGN_OR_RETURN(JobConfig job, load_run_job(run_dir));
  Target t;
  t.run_dir = run_dir;
  t.store = job.actor.store;
  t.manager = job.actor.manager;
  t.model = job.actor.model;
  t.curve = job.auth == "curve";
  t.stream_encryption =
      job.relay.stream_encryption == "auto" ? job.stream_encryption : job.relay.stream_encryption;
  t.keys_dir = (fs::path(run_dir) / "keys").string();
  if (t.store.empty() || t.manager.empty()) {
    return core::failed_precondition(
        fmt::format("{}: its job.json names no store or manager endpoint", run_dir));
  }
  if (t.curve) {
    SLUICE_ASSIGN_OR_RETURN(core::Members members,
                            core::read_members_file(core::members_file_path(t.keys_dir)));
    for (const auto& m : members.all()) {
      if (!fs::exists(core::key_file_path(t.keys_dir, m.identity), ec)) continue;
      if (m.role == core::kRoleRelay) t.relays.push_back(m.identity);
      if (m.role == core::kRoleRollout) t.rollouts.push_back(m.identity);
    }
    t.members = std::make_shared<const core::Members>(std::move(members));
  } else {
    for (std::uint32_t i = 0; i < job.relays; ++i)
      t.relays.push_back(fmt::format("relay-{}", i));
    for (std::uint32_t i = 0; i < job.rollouts; ++i)
      t.rollouts.push_back(fmt::format("rollout-{}", i));
  }
  return t;
}

}  // namespace
}  // namespace attack

int run_attack(const AttackArgs& args) {
  using namespace attack;
  core::log::set_process_name("attack");
  auto fail = [](int code, const Status& s) {
    std::fprintf(stderr, "sluice attack: %s\n", s.to_string().c_str());
    return code;
  };
  // --only first: bad input starts nothing.
  static constexpr const char* kPhaseKeys[] = {
      "strangers", "versions", "owners",        "identities",   "manager", "foreign",
      "oversized", "modes",    "chunk-servers", "served-bytes", "agent"};
  std::set<std::string> only;
  {
    std::stringstream ss(args.only);
    for (std::string k; std::getline(ss, k, ',');) {
      if (k.empty()) continue;
      if (std::find(std::begin(kPhaseKeys), std::end(kPhaseKeys), k) == std::end(kPhaseKeys)) {
        return fail(2,
                    core::invalid_argument(fmt::format(
                        "--only: no phase '{}' (strangers, versions, owners, identities, "
                        "manager, foreign, oversized, modes, chunk-servers, served-bytes, agent)",
                        k)));
      }
      only.insert(k);
    }
  }
  auto target = read_target(args.run_dir);
  if (!target.is_ok()) return fail(2, target.status());
  const Target& t = *target;
  auto loop = core::EventLoop::create();
  if (!loop.is_ok()) return fail(1, loop.status());
  // Whether the job ended with outcome ok (sluice run's summary.json says so).
  const fs::path summary = fs::path(args.run_dir) / "summary.json";
  auto ended_ok = [summary] {
    std::ifstream f(summary);
    if (!f) return false;
    auto j = nlohmann::json::parse(f, nullptr, false);
    return j.is_object() && j.value("outcome", std::string()) == "ok";
  };
  Report report(ended_ok);
  Attacker attacker(**loop, t, args, report);
  if (auto s = attacker.start(); !s.is_ok()) return fail(2, s.with_context("the job's keys"));
  auto before = attacker.latest();
  if (!before.is_ok()) {
    return fail(2, core::unavailable(
                       fmt::format("{} is not a running job: its store at {} does not answer ({})",
                                   args.run_dir, t.store, before.status().to_string())));
  }
  std::printf("sluice attack: job %s, store %s, manager %s, auth %s, newest version %llu\n",
              args.run_dir.c_str(), t.store.c_str(), t.manager.c_str(), t.curve ? "curve" : "plain",
              static_cast<unsigned long long>(*before));
  std::fflush(stdout);

  // A job that ends while it is attacked is no breach: what is left is skipped, saying so.
  auto ended = [&] {
    std::error_code ec;
    return fs::exists(summary, ec);
  };
  struct Phase {
    const char* key;   // as --only names it
    const char* name;  // as the report names it
    std::function<void()> play;
  };
  const Phase phases[] = {
      {"strangers", "strangers", [&] { attacker.strangers(); }},
      {"versions", "versions", [&] { attacker.versions(); }},
      {"owners", "owners and leases", [&] { attacker.owners_and_leases(); }},
      {"identities", "holder ids and caps", [&] { attacker.identities(); }},
      {"manager", "manager roles", [&] { attacker.manager_roles(); }},
      {"foreign", "another rollout's trajectory", [&] { attacker.foreign_finish(); }},
      {"oversized", "oversized message", [&] { attacker.oversized(); }},
      {"modes", "key file modes", [&] { attacker.file_modes(); }},
      {"chunk-servers", "chunk servers",
       [&] {
         play_chunk_servers([&] { return attacker.plan(); },
                            [&](std::uint64_t lease) { attacker.release(lease); },
                            args.idle_connections, report);
       }},
      {"served-bytes", "served bytes",
       [&] {
         play_served_bytes(**loop, t, attacker.operator_store(), attacker.relay_key(), report);
       }},
      {"agent", "agent endpoints", [&] { play_agent_endpoints(args.run_dir, report); }},
  };
  for (const auto& [key, name, play] : phases) {
    if (!only.empty() && !only.count(key)) continue;
    if (ended()) {
      report.skip(name, "the job ended before they were played (its summary.json appeared)");
      continue;
    }
    play();
  }

  // The job must still be there, and its versions must not have gone backwards.
  auto after = attacker.latest();
  Attempt alive{"job-alive", "the store's newest version after every attempt", "",
                Verdict::kSurvived};
  if (!after.is_ok() && ended()) {
    alive.got = "the job ended meanwhile (its summary.json appeared)";
  } else if (!after.is_ok()) {
    alive.got = "the store does not answer: " + after.status().to_string();
    alive.verdict = Verdict::kBreach;
  } else {
    alive.got = fmt::format("version {} before, {} after", *before, *after);
    if (*after < *before) alive.verdict = Verdict::kBreach;
  }
  report.add(std::move(alive));
  std::printf("sluice attack: %zu attempts played, %zu skipped, %zu breaches\n", report.played(),
              report.skipped(), report.breaches());
  return report.breaches() > 0 ? 1 : 0;
}

}  // namespace sluice::cli
