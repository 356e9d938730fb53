#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../support/job_keys.hpp"
#include "core/event_loop.hpp"
#include "core/metrics.hpp"
#include "wire/messaging.hpp"
#include "wire/security.hpp"

using namespace sluice::core;
using sluice::testing::JobKeys;
using sluice::testing::never_answered;

namespace {

unsigned file_mode(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

double refused(const std::string& reason) {
  return process_metrics()
      .counter("sluice_refused_total", "requests refused, by reason", {{"reason", reason}})
      .value();
}

// A curve server of the job's "weightstore" identity with one handler for actors only and one
// for any member; it records who called.
struct Served {
  std::unique_ptr<EventLoop> loop = EventLoop::create().value();
  std::unique_ptr<Server> server;
  std::vector<Peer> seen;
  explicit Served(const JobKeys& keys) {
    server = Server::create(*loop, "tcp://127.0.0.1:*", keys.security("weightstore")).value();
    server->on_sync("actors.only",
                    [this](const Message& m) -> Result<Message> {
                      seen.push_back(m.peer);
                      return Message("ok");
                    },
                    {kRoleActor});
    server->on_sync("members", [this](const Message& m) -> Result<Message> {
      seen.push_back(m.peer);
      return Message("ok");
    });
  }
};

}  // namespace

TEST_SUITE("core.security") {
  TEST_CASE("a job's keys: files of mode 0600, members with their roles, bad files named") {
    JobKeys keys;
    for (const auto& id : {"weightstore", "actor", "relay-0", "operator"}) {
      CHECK(file_mode(key_file_path(keys.dir, id)) == 0600);
    }
    CHECK(file_mode(members_file_path(keys.dir)) == 0600);
    auto members = read_members_file(members_file_path(keys.dir));
    REQUIRE(members.is_ok());
    CHECK(members->all().size() == 7);
    REQUIRE(members->by_identity("relay-0"));
    CHECK(members->by_identity("relay-0")->role == "relay");
    auto store = members->only_of_role("weightstore");
    REQUIRE(store.is_ok());
    CHECK((*store)->identity == "weightstore");
    CHECK(members->only_of_role("rollout").status().code() == Code::kInvalidArgument);

    // A secret key file that others may read is refused, and the message names it.
    const std::string actor = key_file_path(keys.dir, "actor");
    std::filesystem::permissions(actor, std::filesystem::perms::others_read,
                                 std::filesystem::perm_options::add);
    auto k = read_key_file(actor);
    CHECK(k.status().code() == Code::kInvalidArgument);
    CHECK(k.status().message().find(actor) != std::string::npos);
    CHECK(k.status().message().find("0604") != std::string::npos);
    auto loaded = load_security(keys.config("actor"), "test");
    CHECK_FALSE(loaded.is_ok());

    // A missing one too, and a configuration in curve mode without files.
    SecurityConfig missing = keys.config("relay-0");
    missing.key_file = keys.dir + "/nobody.key";
    auto m = load_security(missing, "test");
    CHECK(m.status().code() == Code::kNotFound);
    CHECK(m.status().message().find(keys.dir + "/nobody.key") != std::string::npos);
    CHECK(load_security(SecurityConfig{}, "test").status().message().find("key_file") !=
          std::string::npos);
    SecurityConfig bad_mode;
    bad_mode.mode = "none";
    CHECK_FALSE(bad_mode.validate().is_ok());
    SecurityConfig plain;
    plain.mode = "plain";
    auto p = load_security(plain, "test");
    REQUIRE(p.is_ok());
    CHECK_FALSE(p->curve());
  }

  TEST_CASE("a members or key file that another user could have written is refused, named") {
    JobKeys keys;
    const std::string members = members_file_path(keys.dir);
    const std::string key = key_file_path(keys.dir, "actor");
    REQUIRE(load_security(keys.config("actor"), "test").is_ok());
    // Group- or world-writable members file: anyone could add a key with any role.
    for (auto p : {std::filesystem::perms::group_write, std::filesystem::perms::others_write}) {
      std::filesystem::permissions(
          members, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | p);
      auto r = read_members_file(members);
      CHECK(r.status().code() == Code::kInvalidArgument);
      CHECK(r.status().message().find(members) != std::string::npos);
      CHECK(r.status().message().find(p == std::filesystem::perms::group_write ? "0620" : "0602") !=
            std::string::npos);
      auto loaded = load_security(keys.config("actor"), "test");
      CHECK(loaded.status().message().find("may be written by others") != std::string::npos);
    }
    // Readable by all is fine for the members file (it holds no secret), not for a key file.
    std::filesystem::permissions(members, std::filesystem::perms::owner_read |
                                              std::filesystem::perms::owner_write |
                                              std::filesystem::perms::others_read);
    CHECK(read_members_file(members).is_ok());
    std::filesystem::permissions(key, std::filesystem::perms::owner_read |
                                          std::filesystem::perms::owner_write |
                                          std::filesystem::perms::group_write);
    auto k = read_key_file(key);
    CHECK(k.status().message().find(key) != std::string::npos);
    CHECK(k.status().message().find("0620") != std::string::npos);
    std::filesystem::permissions(
        key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    REQUIRE(read_key_file(key).is_ok());
    // Owned by another user (only root can hand a file to someone else, so only root checks it).
    if (::geteuid() != 0) {
      MESSAGE("skipped: the owner check needs root to chown a file");
      return;
    }
    REQUIRE(::chown(members.c_str(), 12345, 12345) == 0);
    auto r = read_members_file(members);
    CHECK(r.status().message().find("owned by uid 12345") != std::string::npos);
    CHECK(r.status().message().find(members) != std::string::npos);
    REQUIRE(::chown(key.c_str(), 12345, 12345) == 0);
    CHECK(read_key_file(key).status().message().find("owned by uid 12345") != std::string::npos);
  }

  TEST_CASE(
      "a curve server knows each request's member, and refuses other roles before the handler") {
    REQUIRE(curve_available());
    JobKeys keys;
    Served s(keys);
    CHECK(s.server->authenticates());
    auto actor =
        Client::create(*s.loop, s.server->endpoint(), keys.client_of("actor", kRoleWeightstore))
            .value();
    auto relay =
        Client::create(*s.loop, s.server->endpoint(), keys.client_of("relay-0", kRoleWeightstore))
            .value();
    REQUIRE(actor->call(Message("actors.only"), Millis(5000)).is_ok());
    REQUIRE(s.seen.size() == 1);
    CHECK(s.seen[0].authenticated);
    CHECK(s.seen[0].identity == "actor");
    CHECK(s.seen[0].role == "actor");

    double role_before = refused("role");
    auto r = relay->call(Message("actors.only"), Millis(5000));
    CHECK(r.status().code() == Code::kPermissionDenied);
    CHECK(r.status().message().find("relay-0 (role relay) may not send 'actors.only'") !=
          std::string::npos);
    CHECK(s.seen.size() == 1);  // the handler never ran
    CHECK(refused("role") == role_before + 1);
    CHECK(s.server->stats().refused == 1);
    // Any member may send what is registered for every role.
    REQUIRE(relay->call(Message("members"), Millis(5000)).is_ok());
    CHECK(s.seen.back().identity == "relay-0");
    CHECK(relay->ping(Millis(5000)).is_ok());
  }

  TEST_CASE(
      "a key outside the job, a plain client and a client expecting another key get nothing") {
    JobKeys keys;
    JobKeys other;  // another job: its keys are in no members file of this one
    Served s(keys);
    double unauth_before = refused("unauthenticated");

    // An outsider with the right server key but its own key pair: ZAP refuses the handshake.
    Security outsider = other.security("actor");
    outsider.server_key = keys.client_of("actor", kRoleWeightstore).server_key;
    auto c1 = Client::create(*s.loop, s.server->endpoint(), outsider).value();
    CHECK(never_answered(c1->call(Message("members"), Millis(700))));
    CHECK(refused("unauthenticated") > unauth_before);
    CHECK(s.server->stats().refused >= 1);

    // A plain client never completes a CURVE handshake; the server counts it.
    std::uint64_t refused_before = s.server->stats().refused;
    auto c2 = Client::create(*s.loop, s.server->endpoint(), Security::plain()).value();
    CHECK(never_answered(c2->call(Message("members"), Millis(700))));
    CHECK(s.loop->run_until([&] { return s.server->stats().refused > refused_before; },
                            Millis(2000)));

    // A member that expects the server's key of another job: the server is an impostor to it.
    Security member = keys.security("actor");
    member.server_key = other.client_of("actor", kRoleWeightstore).server_key;
    auto c3 = Client::create(*s.loop, s.server->endpoint(), member).value();
    CHECK(never_answered(c3->call(Message("members"), Millis(700))));

    CHECK(s.seen.empty());
    // The server still serves its members.
    auto ok =
        Client::create(*s.loop, s.server->endpoint(), keys.client_of("actor", kRoleWeightstore))
            .value();
    CHECK(ok->call(Message("members"), Millis(5000)).is_ok());
  }

  TEST_CASE("a request of a client whose handshake was refused times out and does not fail early") {
    // After the server refused the handshake, the client has no connection that could take the
    // request until it reconnects. The caller still gets what a silent peer gives, a time-out
    // after the time it asked for, not an error about queues at once.
    JobKeys keys;
    Served s(keys);
    for (int round = 0; round < 3; ++round) {
      std::uint64_t refused_before = s.server->stats().refused;
      auto c = Client::create(*s.loop, s.server->endpoint(), Security::plain()).value();
      c->send(Message("members")).ignore();  // starts the connection
      REQUIRE(s.loop->run_until([&] { return s.server->stats().refused > refused_before; },
                                Millis(5000)));
      const auto t0 = Clock::now();
      auto r = c->call(Message("members"), Millis(400));
      CHECK(r.status().code() == Code::kTimeout);
      CHECK(Clock::now() - t0 >= Millis(400));
    }
    CHECK(s.seen.empty());
  }

  TEST_CASE("the actor's signing key: public in the members file, secret in its key file only") {
    JobKeys keys;
    auto members = read_members_file(members_file_path(keys.dir)).value();
    const Member* actor = members.by_identity("actor");
    REQUIRE(actor);
    CHECK(valid_sign_key(actor->sign_key));
    CHECK(members.version_signers() == std::vector<std::string>{actor->sign_key});
    for (const auto& m : members.all())
      if (m.role != kRoleActor) CHECK(m.sign_key.empty());
    // Its secret half is in the actor's key file (mode 0600), and loads with it.
    auto key = read_key_file(key_file_path(keys.dir, "actor")).value();
    CHECK(key.sign.public_key == actor->sign_key);
    CHECK_FALSE(key.sign.secret_key.empty());
    Security sec = keys.security("actor");
    CHECK(sec.sign.public_key == actor->sign_key);
    CHECK(sec.versions_signed());
    CHECK(sec.version_signers() == std::vector<std::string>{actor->sign_key});
    // Nobody else holds it: a relay loads no signing key but knows whose signatures count.
    Security relay = keys.security("relay-0");
    CHECK(relay.sign.secret_key.empty());
    CHECK(relay.version_signers() == std::vector<std::string>{actor->sign_key});
    CHECK(read_key_file(key_file_path(keys.dir, "relay-0")).value().sign.secret_key.empty());
    // A signature made with it verifies against the public half, and only for the same bytes.
    auto sig = sign_message("version 3", sec.sign).value();
    CHECK(signature_valid("version 3", sig, actor->sign_key));
    CHECK_FALSE(signature_valid("version 4", sig, actor->sign_key));
    CHECK_FALSE(signature_valid("version 3", sig, make_sign_key_pair().value().public_key));
    CHECK_FALSE(signature_valid("version 3", "zz", actor->sign_key));
  }

  TEST_CASE("members files: a sign_key only for actors, and curve mode needs the actor's") {
    JobKeys keys;
    const std::string path = members_file_path(keys.dir);
    Members members = read_members_file(path).value();
    // A relay with a sign_key would be a second version maker: refused.
    Member relay = *members.by_identity("relay-0");
    relay.identity = "relay-9";
    relay.public_key = make_key_pair().value().public_key;
    relay.sign_key = make_sign_key_pair().value().public_key;
    Members more = members;
    Status s = more.add(relay);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("only actors sign versions") != std::string::npos);
    Member actor2{"actor-2", kRoleActor, make_key_pair().value().public_key, "ABCD"};
    CHECK(more.add(actor2).message().find("malformed sign_key") != std::string::npos);

    // A members file from before signatures (no sign_key) still parses: the format is
    // compatible. But curve mode refuses it, naming the actor and the remedy.
    Members old;
    for (Member m : members.all()) {
      m.sign_key.clear();
      REQUIRE(old.add(m).is_ok());
    }
    REQUIRE(write_members_file(path, old).is_ok());
    auto parsed = read_members_file(path);
    REQUIRE(parsed.is_ok());
    CHECK(parsed->version_signers().empty());
    auto loaded = load_security(keys.config("rollout-0"), "test");
    CHECK(loaded.status().code() == Code::kInvalidArgument);
    CHECK(loaded.status().message().find("actor 'actor' has no sign_key") != std::string::npos);
    CHECK(loaded.status().message().find("sluice keys") != std::string::npos);

    // An actor whose key file lacks the secret half of its sign_key cannot load.
    REQUIRE(write_members_file(path, members).is_ok());
    KeyFile k = read_key_file(key_file_path(keys.dir, "actor")).value();
    k.sign = SignKeyPair{};
    REQUIRE(write_key_file(key_file_path(keys.dir, "actor"), k).is_ok());
    auto actor_loaded = load_security(keys.config("actor"), "test");
    CHECK(actor_loaded.status().message().find("has no signing key") != std::string::npos);
    k.sign = make_sign_key_pair().value();
    REQUIRE(write_key_file(key_file_path(keys.dir, "actor"), k).is_ok());
    actor_loaded = load_security(keys.config("actor"), "test");
    CHECK(actor_loaded.status().message().find("another signing key") != std::string::npos);
  }

  TEST_CASE("curve settings without keys are refused at create: refusals are exported") {
    auto loop = EventLoop::create().value();
    Security nokeys;  // curve by default
    CHECK(Server::create(*loop, "tcp://127.0.0.1:*", nokeys).status().code() ==
          Code::kInvalidArgument);
    CHECK(Client::create(*loop, "tcp://127.0.0.1:1", nokeys).status().code() ==
          Code::kInvalidArgument);
    count_refusal("malformed", "test peer", "test");
    CHECK(process_metrics().prometheus_text().find("sluice_refused_total{reason=\"malformed\"}") !=
          std::string::npos);
  }
}
