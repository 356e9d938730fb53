// Authentication of the control plane: a job's CURVE keys, who belongs to the job, and the
// security settings a messaging Server or Client is created with.
//
// A job has one key pair per identity ("weightstore", "rollout-manager", "actor", "relay-0",
// "rollout-3", "operator") and one members file, the allow-list that maps each public key to its
// identity and role. `sluice keys DIR` and `sluice run` write them:
//
//   DIR/<identity>.key   {"identity", "role", "public_key", "secret_key"} (Z85), mode 0600
//   DIR/members.json     {"version": 1, "members": [{"identity", "role", "public_key"}, ...]}
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

struct Member {
  std::string identity;
  std::string role;
  std::string public_key;
};

// The job's members: public key -> member. Identities are unique.
class Members {
 public:
  Status add(Member m);  // invalid_argument on a duplicate key or identity, or a bad role/key
  const Member* by_key(const std::string& public_key) const;
  const Member* by_identity(const std::string& identity) const;
  // The one member with `role`; not_found when there is none, invalid_argument for several.
  Result<const Member*> only_of_role(const std::string& role) const;
  const std::vector<Member>& all() const { return members_; }

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
};
// Reading a key file or the members file refuses one that another user could have written
// (owned by someone other than this user or root, or writable by group or others) and a key file
// that others may read, with an error that names the file and its mode.
Result<KeyFile> read_key_file(const std::string& path);
// Writes a key file with mode 0600 (created so, never readable by others in between).
Status write_key_file(const std::string& path, const KeyFile& k);
Result<Members> read_members_file(const std::string& path);
Status write_members_file(const std::string& path, const Members& m);

// Makes a key pair for each (identity, role) in `dir` (created 0700 if missing), and the
// members file listing them all. Existing files are replaced. Returns the members.
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

  // Plain mode, said explicitly (unit tests, tools talking to a plain job).
  static Security plain();
  bool curve() const { return mode == Mode::kCurve; }
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
Result<Security> load_security(const SecurityConfig& cfg, const std::string& who);

// Counts a refused request in the process metrics (sluice_refused_total{reason}) and logs it at
// warn the first time for each (peer, reason). Reasons: unauthenticated, role, owner,
// malformed, oversized.
void count_refusal(const std::string& reason, const std::string& peer, const std::string& detail);

// Warns loudly (once per process) that `what` runs in plain mode.
void warn_plain(const std::string& what);

}  // namespace sluice::core
