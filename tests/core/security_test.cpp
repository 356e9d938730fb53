#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../support/job_keys.hpp"
#include "core/event_loop.hpp"
#include "core/messaging.hpp"
#include "core/metrics.hpp"
#include "core/security.hpp"

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

  TEST_CASE("curve settings without keys are refused at create; refusals are exported") {
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
