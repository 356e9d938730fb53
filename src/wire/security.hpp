// Authentication of the control plane: a job's CURVE keys, who belongs to the job, and the
// security settings a messaging Server or Client is created with.
//
// A job has one key pair per identity ("weightstore", "rollout-manager", "actor", "relay-0",
// "rollout-3", "operator") and one members file, the allow-list that maps each public key to its
// identity and role. `sluice keys DIR` and `sluice run` write them:
//
//   DIR/<identity>.key   {"identity", "role", "public_key", "secret_key"} (Z85), mode 0600;
//                        an actor's also {"sign_public_key", "sign_secret_key"} (hex Ed25519)
//   DIR/members.json     {"version": 1, "members": [{"identity", "role", "public_key"}, ...]};
//                        an actor member also has "sign_key" (its Ed25519 public key, hex)
//
// A version is something only the actor can make: it signs each manifest with its Ed25519 key
// (format/manifest.hpp), and stores and readers accept a manifest only with a signature by an
// actor's sign_key from the members file. The sign_key field is optional in the file format (a
// file without it still parses), but curve mode requires it for every actor member, and an
// actor's key file must hold the matching secret half.
//
// A server in curve mode admits only the members file's keys (checked through ZAP, see
// messaging.hpp) and knows each request's identity and role; a client in curve mode finds the
// server's public key in the same file by the server's role, so an impostor server with another
// key never completes the handshake. Plain mode (no keys, nobody authenticated, no
// authorization) exists for unit tests and tools, only when configured, and warns loudly.
//
// Thread safety: the types are values; count_refusal() may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace sluice::core {

// The roles a member may have. A members file with any other role is refused.
inline constexpr const char* kRoleWeightstore = "weightstore";
inline constexpr const char* kRoleManager = "rollout-manager";
inline constexpr const char* kRoleActor = "actor";
inline constexpr const char* kRoleRelay = "relay";
inline constexpr const char* kRoleRollout = "rollout";
inline constexpr const char* kRoleOperator = "operator";  // the launcher and command-line tools
bool is_known_role(const std::string& role);

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// Whether this libzmq can do CURVE (it is built with libsodium in Debian).
bool curve_available();
// A fresh key pair (zmq_curve_keypair); unavailable without CURVE support.
Result<KeyPair> make_key_pair();

// An Ed25519 key pair for version signatures (libsodium).
struct SignKeyPair {
  std::string public_key;  // hex, 64 characters (32 bytes)
  std::string secret_key;  // hex, 64 characters (the 32-byte seed the key pair derives from)
};
// A fresh signing key pair.
Result<SignKeyPair> make_sign_key_pair();
// The key pair of a 32-byte seed (hex, 64 characters); invalid_argument for anything else.
Result<SignKeyPair> sign_key_pair_from_seed(const std::string& seed_hex);
// Whether `key` is an Ed25519 public key in hex (64 lowercase hex characters).
bool valid_sign_key(const std::string& key);
// The detached Ed25519 signature of `message` by `key`, in hex (128 lowercase characters).
Result<std::string> sign_message(std::string_view message, const SignKeyPair& key);
// Whether `signature_hex` is `public_key_hex`'s signature of `message`. False for malformed hex,
// a key that is not a key, or a signature that does not verify.
bool signature_valid(std::string_view message, std::string_view signature_hex,
                     const std::string& public_key_hex);

struct Member {
  std::string identity;
  std::string role;
  std::string public_key;
  std::string sign_key;  // actors: the Ed25519 public key that signs versions (hex); else empty
};

// The job's members: public key -> member. Identities are unique.
class Members {
 public:
  // invalid_argument on a duplicate key or identity, a bad role/key, a malformed sign_key, or a
  // sign_key on a member that is not an actor (only actors sign versions).
  Status add(Member m);
  const Member* by_key(const std::string& public_key) const;
  const Member* by_identity(const std::string& identity) const;
  // Whether `holder_id` is member `identity`'s to hold under: the identity itself, or the identity,
  // '-' and a suffix that is not another member's identity ("actor" holds as "actor-0", never as
  // "relay-0"). A holder id is bound to one identity for good, so that nobody can take a holder's
  // id while it is down, and a reader can tell the holder a plan names from a stand-in.
  bool owns_holder_id(const std::string& identity, const std::string& holder_id) const;
  // The one member with `role`; not_found when there is none, invalid_argument for several.
  Result<const Member*> only_of_role(const std::string& role) const;
  const std::vector<Member>& all() const { return members_; }
  // The actors' sign keys: who may make a version.
  std::vector<std::string> version_signers() const;

 private:
  std::vector<Member> members_;
  std::map<std::string, std::size_t> by_key_, by_identity_;
};

// Reads a secret key file. A missing or unreadable file, one that group or others may read
// (mode & 077), or one that is not a key file is an error naming the path.
struct KeyFile {
  std::string identity;
  std::string role;
  KeyPair keys;
  // An actor's: its version signing key pair (both fields empty when the file has none). A key
  // file with a secret that does not derive the public key it names is refused.
  SignKeyPair sign;
};
// Reading a key file or the members file refuses one that another user could have written
// (owned by someone other than this user or root, or writable by group or others) and a key file
// that others may read, with an error that names the file and its mode.
Result<KeyFile> read_key_file(const std::string& path);
// Writes `text` to `path` with mode 0600, created so: never readable by others in between.
Status write_private_file(const std::string& path, const std::string& text);
// Writes a key file with mode 0600 (created so, never readable by others in between).
Status write_key_file(const std::string& path, const KeyFile& k);
Result<Members> read_members_file(const std::string& path);
Status write_members_file(const std::string& path, const Members& m);

// Makes a key pair for each (identity, role) in `dir` (created 0700 if missing), and the
// members file listing them all; each actor gets a signing key pair as well (its public half in
// the members file as sign_key). Existing files are replaced. Returns the members.
Result<Members> make_job_keys(const std::string& dir,
                              const std::vector<std::pair<std::string, std::string>>& identities);
// The key file and members file paths inside a keys folder.
std::string key_file_path(const std::string& dir, const std::string& identity);
std::string members_file_path(const std::string& dir);

// What a Server or Client is created with.
struct Security {
  enum class Mode { kCurve, kPlain };
  Mode mode = Mode::kCurve;
  std::string identity;  // curve: this process's identity (for logs)
  KeyPair keys;          // curve: this process's key pair
  // curve: the job's members. A server admits only these; a client takes the server's public
  // key from here (server_key).
  std::shared_ptr<const Members> members;
  std::string server_key;  // client, curve: the server's public key
  // curve, an actor: its version signing key pair (the key file's sign_public_key and
  // sign_secret_key); empty for every other role and in plain mode.
  SignKeyPair sign;

  // Plain mode, said explicitly (unit tests, tools talking to a plain job).
  static Security plain();
  bool curve() const { return mode == Mode::kCurve; }
  // Whether manifests must carry an actor's signature: in curve mode, always. In plain mode
  // nothing is signed or checked (nobody is authenticated, so a signature would prove nothing
  // that the plain control plane does not already give away; load_security says so loudly).
  bool versions_signed() const { return curve(); }
  // The sign keys a manifest may be signed by (the members' actors); empty in plain mode.
  std::vector<std::string> version_signers() const;
  // This security with server_key set to the public key of the job's member with `role`
  // ("weightstore", "rollout-manager"): what a client of that server is created with. Plain
  // mode is returned as it is.
  Result<Security> for_server(const std::string& role) const;
};

// The settings a role's configuration carries (its `security` section).
struct SecurityConfig {
  std::string mode = "curve";  // curve or plain; plain only when configured, and it warns
  std::string key_file;        // curve: this role's secret key file (mode 0600)
  std::string members_file;    // curve: the job's members file (the allow-list)

  template <typename V>
  void describe(V& v) {
    v("mode", mode,
      "curve (authenticated and encrypted; default) or plain (no authentication: anyone who "
      "reaches the port drives the role; warns at start-up)");
    v("key_file", key_file, "curve: this role's secret key file, mode 0600 (sluice keys)");
    v("members_file", members_file, "curve: the job's members file, the allow-list (sluice keys)");
  }
  // Checks the mode (run when the configuration is parsed; a job's sections are filled in by the
  // launcher after that, so the files are checked when the role starts, by check_files()).
  Status validate() const;
  // In curve mode: both files are given and readable, the key file is a key file and not
  // readable by group or others. Errors name the path.
  Status check_files() const;
};

// Loads what a SecurityConfig names (check_files() first). In plain mode, warns loudly (once per
// process) and returns Security::plain(). `who` names the role in messages ("weightstore").
// Curve mode also requires a sign_key for every actor member of the members file (a file made
// before version signatures is refused, with the remedy named), and an actor's key file to hold
// the secret half of its member's sign_key.
Result<Security> load_security(const SecurityConfig& cfg, const std::string& who);

// Counts a refused request in the process metrics (sluice_refused_total{reason}) and logs it at
// warn the first time for each (peer, reason). Reasons: unauthenticated, role, owner,
// malformed, oversized, signature (a manifest no actor signed).
void count_refusal(const std::string& reason, const std::string& peer, const std::string& detail);

// Warns loudly (once per process) that `what` runs in plain mode.
void warn_plain(const std::string& what);

}  // namespace sluice::core
