#include "wire/security.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/log.hpp"
#include "core/metrics.hpp"

namespace sluice::core {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::size_t kZ85KeyChars = 40;
constexpr int kMembersVersion = 1;
// Remembered (peer, reason) pairs for once-only warnings; beyond this many, refusals are still
// counted but no longer logged (a scan from many addresses must not grow memory without bound).
constexpr std::size_t kMaxRememberedRefusals = 4096;

bool valid_z85_key(const std::string& k) {
  if (k.size() != kZ85KeyChars) return false;
  std::uint8_t raw[32];
  return zmq_z85_decode(raw, k.c_str()) != nullptr;
}

// Lowercase hex of `n` bytes, and back: `hex` must be exactly 2n lowercase hex characters (one
// spelling per value, so a signature or key compares equal only to itself).
std::string to_hex(const unsigned char* bytes, std::size_t n) {
  std::string out(2 * n + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes, n);
  out.pop_back();
  return out;
}

bool from_hex(std::string_view hex, unsigned char* out, std::size_t n) {
  if (hex.size() != 2 * n) return false;
  for (char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  std::size_t got = 0;
  return sodium_hex2bin(out, n, hex.data(), hex.size(), nullptr, &got, nullptr) == 0 && got == n;
}

Status sodium_ready() {
  // sodium_init() is idempotent and thread-safe: 0 the first time, 1 afterwards, -1 on failure.
  static const int rc = sodium_init();
  if (rc < 0) return internal_error("libsodium failed to initialise");
  return {};
}

Result<std::string> read_small_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found(path + ": cannot read (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.size() > (1u << 20)) return invalid_argument(path + ": larger than 1 MiB");
  return text;
}

}  // namespace

// A temporary file created 0600 and renamed over.
Status write_private_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return unavailable("cannot create " + tmp + ": " + std::strerror(errno));
  // The mode given to open() is masked by umask; 0600 is narrower than any umask leaves, but an
  // existing temporary file keeps its mode, so set it explicitly.
  bool ok = ::fchmod(fd, 0600) == 0;
  std::size_t off = 0;
  while (ok && off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<std::size_t>(n);
  }
  ok = ::fsync(fd) == 0 && ok;
  int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) err = errno;
    ::unlink(tmp.c_str());
    return unavailable("cannot write " + path + ": " + std::strerror(err));
  }
  return {};
}

namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// A file that decides who may talk to the job (`what`: "members file", "secret key file") must
// be a regular file that nobody but this user (or root) could have written: owned by this user
// or root, and not writable by group or others. `secret`: nor readable by them.
Status check_trusted_file(const std::string& path, const std::string& what, bool secret) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return not_found(what + " " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return invalid_argument(what + " " + path + " is not a file");
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return invalid_argument(what + " " + path + " is owned by uid " + std::to_string(st.st_uid) +
                            ", not by this user (uid " + std::to_string(me) +
                            ") or root: another user could have written it");
  }
  if ((st.st_mode & 022) != 0) {
    return invalid_argument(what + " " + path + " may be written by others (mode " +
                            octal_mode(st.st_mode) + "); chmod go-w " + path);
  }
  if (secret && (st.st_mode & 077) != 0) {
    return invalid_argument(what + " " + path + " may be read by others (mode " +
                            octal_mode(st.st_mode) + "); chmod 600 " + path);
  }
  return {};
}

Result<json> parse_file_json(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string text, read_small_file(path));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument(path + ": not a JSON object");
  }
  return j;
}

Result<std::string> string_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    return invalid_argument(where + ": '" + key + "' must be a string");
  }
  return it->get<std::string>();
}

}  // namespace

bool is_known_role(const std::string& role) {
  for (const char* r :
       {kRoleWeightstore, kRoleManager, kRoleActor, kRoleRelay, kRoleRollout, kRoleOperator}) {
    if (role == r) return true;
  }
  return false;
}

bool curve_available() {
  return zmq_has("curve") != 0;
}

Result<KeyPair> make_key_pair() {
  if (!curve_available()) {
    return unavailable("this libzmq has no CURVE support (it must be built with libsodium)");
  }
  char pub[kZ85KeyChars + 1] = {};
  char sec[kZ85KeyChars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return internal_error(std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  }
  KeyPair k{pub, sec};
  std::memset(sec, 0, sizeof sec);
  return k;
}

// ---------------------------------------------------------------- version signatures

bool valid_sign_key(const std::string& key) {
  unsigned char raw[crypto_sign_PUBLICKEYBYTES];
  return from_hex(key, raw, sizeof raw);
}

Result<SignKeyPair> sign_key_pair_from_seed(const std::string& seed_hex) {
  SLUICE_TRY(sodium_ready());
  unsigned char seed[crypto_sign_SEEDBYTES];
  if (!from_hex(seed_hex, seed, sizeof seed)) {
    return invalid_argument("a signing secret key must be 64 lowercase hex characters");
  }
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  unsigned char sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, seed);
  SignKeyPair k{to_hex(pk, sizeof pk), seed_hex};
  sodium_memzero(sk, sizeof sk);
  sodium_memzero(seed, sizeof seed);
  return k;
}

Result<SignKeyPair> make_sign_key_pair() {
  SLUICE_TRY(sodium_ready());
  unsigned char seed[crypto_sign_SEEDBYTES];
  randombytes_buf(seed, sizeof seed);
  std::string hex = to_hex(seed, sizeof seed);
  sodium_memzero(seed, sizeof seed);
  return sign_key_pair_from_seed(hex);
}

Result<std::string> sign_message(std::string_view message, const SignKeyPair& key) {
  SLUICE_TRY(sodium_ready());
  unsigned char seed[crypto_sign_SEEDBYTES];
  if (!from_hex(key.secret_key, seed, sizeof seed)) {
    return invalid_argument("no signing key (64 lowercase hex characters expected)");
  }
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  unsigned char sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_seed_keypair(pk, sk, seed);
  sodium_memzero(seed, sizeof seed);
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size(), sk);
  sodium_memzero(sk, sizeof sk);
  return to_hex(sig, sizeof sig);
}

bool signature_valid(std::string_view message, std::string_view signature_hex,
                     const std::string& public_key_hex) {
  if (!sodium_ready().is_ok()) return false;
  unsigned char sig[crypto_sign_BYTES];
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  if (!from_hex(signature_hex, sig, sizeof sig) || !from_hex(public_key_hex, pk, sizeof pk)) {
    return false;
  }
  return crypto_sign_verify_detached(sig, reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(), pk) == 0;
}

// ---------------------------------------------------------------- members

Status Members::add(Member m) {
  if (m.identity.empty()) return invalid_argument("a member has an empty identity");
  if (!is_known_role(m.role)) {
    return invalid_argument("member '" + m.identity + "' has an unknown role '" + m.role + "'");
  }
  if (!valid_z85_key(m.public_key)) {
    return invalid_argument("member '" + m.identity + "' has a malformed public key");
  }
  if (!m.sign_key.empty()) {
    if (m.role != kRoleActor) {
      return invalid_argument("member '" + m.identity + "' (role " + m.role +
                              ") has a sign_key: only actors sign versions");
    }
    if (!valid_sign_key(m.sign_key)) {
      return invalid_argument("member '" + m.identity +
                              "' has a malformed sign_key (64 lowercase hex characters expected)");
    }
  }
  if (by_key_.count(m.public_key)) {
    return invalid_argument("member '" + m.identity + "' has the same key as '" +
                            members_[by_key_[m.public_key]].identity + "'");
  }
  if (by_identity_.count(m.identity)) {
    return invalid_argument("identity '" + m.identity + "' is listed twice");
  }
  by_key_[m.public_key] = members_.size();
  by_identity_[m.identity] = members_.size();
  members_.push_back(std::move(m));
  return {};
}

const Member* Members::by_key(const std::string& public_key) const {
  auto it = by_key_.find(public_key);
  return it == by_key_.end() ? nullptr : &members_[it->second];
}

const Member* Members::by_identity(const std::string& identity) const {
  auto it = by_identity_.find(identity);
  return it == by_identity_.end() ? nullptr : &members_[it->second];
}

bool Members::owns_holder_id(const std::string& identity, const std::string& holder_id) const {
  if (identity.empty() || !by_identity(identity)) return false;
  if (holder_id == identity) return true;
  return holder_id.size() > identity.size() + 1 && holder_id.starts_with(identity) &&
         holder_id[identity.size()] == '-' && !by_identity(holder_id);
}

std::vector<std::string> Members::version_signers() const {
  std::vector<std::string> keys;
  for (const auto& m : members_)
    if (m.role == kRoleActor && !m.sign_key.empty()) keys.push_back(m.sign_key);
  return keys;
}

Result<const Member*> Members::only_of_role(const std::string& role) const {
  const Member* found = nullptr;
  for (const auto& m : members_) {
    if (m.role != role) continue;
    if (found) {
      return invalid_argument("the members file has several members with role '" + role + "' (" +
                              found->identity + ", " + m.identity + ")");
    }
    found = &m;
  }
  if (!found) return not_found("the members file has no member with role '" + role + "'");
  return found;
}

// ---------------------------------------------------------------- files

std::string key_file_path(const std::string& dir, const std::string& identity) {
  return (fs::path(dir) / (identity + ".key")).string();
}

std::string members_file_path(const std::string& dir) {
  return (fs::path(dir) / "members.json").string();
}

Result<KeyFile> read_key_file(const std::string& path) {
  SLUICE_TRY(check_trusted_file(path, "secret key file", /*secret=*/true));
  SLUICE_ASSIGN_OR_RETURN(json j, parse_file_json(path));
  KeyFile k;
  std::string where = "secret key file " + path;
  SLUICE_ASSIGN_OR_RETURN(k.identity, string_field(j, "identity", where));
  SLUICE_ASSIGN_OR_RETURN(k.role, string_field(j, "role", where));
  SLUICE_ASSIGN_OR_RETURN(k.keys.public_key, string_field(j, "public_key", where));
  SLUICE_ASSIGN_OR_RETURN(k.keys.secret_key, string_field(j, "secret_key", where));
  if (!valid_z85_key(k.keys.public_key) || !valid_z85_key(k.keys.secret_key)) {
    return invalid_argument(where + ": keys must be 40-character Z85 text");
  }
  if (!is_known_role(k.role)) return invalid_argument(where + ": unknown role '" + k.role + "'");
  // The signing key pair is optional in the format (only an actor has one): both halves or none.
  if (j.contains("sign_public_key") || j.contains("sign_secret_key")) {
    SLUICE_ASSIGN_OR_RETURN(k.sign.public_key, string_field(j, "sign_public_key", where));
    SLUICE_ASSIGN_OR_RETURN(std::string seed, string_field(j, "sign_secret_key", where));
    auto derived = sign_key_pair_from_seed(seed);
    if (!derived.is_ok()) return invalid_argument(where + ": " + derived.status().message());
    if (derived->public_key != k.sign.public_key) {
      return invalid_argument(where + ": sign_secret_key does not belong to sign_public_key");
    }
    k.sign = std::move(derived).value();
  }
  return k;
}

Status write_key_file(const std::string& path, const KeyFile& k) {
  json j{{"identity", k.identity},
         {"role", k.role},
         {"public_key", k.keys.public_key},
         {"secret_key", k.keys.secret_key}};
  if (!k.sign.secret_key.empty()) {
    j["sign_public_key"] = k.sign.public_key;
    j["sign_secret_key"] = k.sign.secret_key;
  }
  return write_private_file(path, j.dump(2) + "\n");
}

Result<Members> read_members_file(const std::string& path) {
  // The allow-list: whoever can rewrite it can add a key of their own, with any role.
  SLUICE_TRY(check_trusted_file(path, "members file", /*secret=*/false));
  SLUICE_ASSIGN_OR_RETURN(json j, parse_file_json(path));
  std::string where = "members file " + path;
  auto v = j.find("version");
  if (v == j.end() || !v->is_number_integer() || v->get<int>() != kMembersVersion) {
    return invalid_argument(where + ": 'version' must be " + std::to_string(kMembersVersion));
  }
  auto list = j.find("members");
  if (list == j.end() || !list->is_array()) {
    return invalid_argument(where + ": 'members' must be an array");
  }
  Members out;
  for (const auto& e : *list) {
    if (!e.is_object()) return invalid_argument(where + ": a member is not an object");
    Member m;
    SLUICE_ASSIGN_OR_RETURN(m.identity, string_field(e, "identity", where));
    SLUICE_ASSIGN_OR_RETURN(m.role, string_field(e, "role", where));
    SLUICE_ASSIGN_OR_RETURN(m.public_key, string_field(e, "public_key", where));
    if (e.contains("sign_key")) {
      SLUICE_ASSIGN_OR_RETURN(m.sign_key, string_field(e, "sign_key", where));
    }
    SLUICE_TRY(out.add(std::move(m)).with_context(where));
  }
  return out;
}

Status write_members_file(const std::string& path, const Members& m) {
  json list = json::array();
  for (const auto& e : m.all()) {
    json member{{"identity", e.identity}, {"role", e.role}, {"public_key", e.public_key}};
    if (!e.sign_key.empty()) member["sign_key"] = e.sign_key;
    list.push_back(std::move(member));
  }
  json j{{"version", kMembersVersion}, {"members", list}};
  return write_private_file(path, j.dump(2) + "\n");
}

Result<Members> make_job_keys(const std::string& dir,
                              const std::vector<std::pair<std::string, std::string>>& identities) {
  std::error_code ec;
  bool created = fs::create_directories(dir, ec);
  if (ec) return unavailable("cannot create " + dir + ": " + ec.message());
  if (created) fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  Members members;
  std::vector<KeyFile> files;
  for (const auto& [identity, role] : identities) {
    if (identity.empty() || identity.find('/') != std::string::npos || identity[0] == '.') {
      return invalid_argument("identity '" + identity + "' cannot name a key file");
    }
    SLUICE_ASSIGN_OR_RETURN(KeyPair kp, make_key_pair());
    SignKeyPair sign;
    if (role == kRoleActor) {
      SLUICE_ASSIGN_OR_RETURN(sign, make_sign_key_pair());
    }
    SLUICE_TRY(members.add(Member{identity, role, kp.public_key, sign.public_key}));
    files.push_back(KeyFile{identity, role, kp, sign});
  }
  for (const auto& k : files)
    SLUICE_TRY(write_key_file(key_file_path(dir, k.identity), k));
  SLUICE_TRY(write_members_file(members_file_path(dir), members));
  return members;
}

// ---------------------------------------------------------------- settings

Security Security::plain() {
  Security s;
  s.mode = Mode::kPlain;
  return s;
}

std::vector<std::string> Security::version_signers() const {
  if (!curve() || !members) return {};
  return members->version_signers();
}

Result<Security> Security::for_server(const std::string& role) const {
  if (!curve()) return *this;
  if (!members) return failed_precondition("curve mode without the job's members");
  SLUICE_ASSIGN_OR_RETURN(const Member* m, members->only_of_role(role));
  Security s = *this;
  s.server_key = m->public_key;
  return s;
}

Status SecurityConfig::validate() const {
  if (mode != "curve" && mode != "plain") {
    return invalid_argument("security.mode must be curve or plain, not '" + mode + "'");
  }
  return {};
}

Status SecurityConfig::check_files() const {
  SLUICE_TRY(validate());
  if (mode == "plain") return {};
  if (key_file.empty()) {
    return invalid_argument(
        "security.key_file is empty: curve mode needs this role's secret key file (make keys "
        "with `sluice keys DIR`, or set security.mode=plain to run unauthenticated)");
  }
  if (members_file.empty()) {
    return invalid_argument(
        "security.members_file is empty: curve mode needs the job's members "
        "file (sluice keys writes DIR/members.json)");
  }
  SLUICE_TRY(read_key_file(key_file).status());
  if (::access(members_file.c_str(), R_OK) != 0) {
    return not_found("members file " + members_file + ": " + std::strerror(errno));
  }
  return check_trusted_file(members_file, "members file", /*secret=*/false);
}

Result<Security> load_security(const SecurityConfig& cfg, const std::string& who) {
  // Every role's /metrics shows its refusal counters from the start, at 0 until something is
  // refused (a scraper can alert on a rate without waiting for the first refusal to create it).
  for (const char* reason :
       {"unauthenticated", "role", "owner", "malformed", "oversized", "signature"})
    process_metrics().counter("sluice_refused_total", "requests refused, by reason",
                              {{"reason", reason}});
  SLUICE_TRY(cfg.check_files().with_context(who));
  if (cfg.mode == "plain") {
    warn_plain(who);
    static std::once_flag once;
    std::call_once(once, [&] {
      log::warn(
          "{}: PLAIN MODE: weight versions are neither signed nor checked; anyone who reaches the "
          "weight store can make a version that rollouts load",
          who);
    });
    return Security::plain();
  }
  if (!curve_available()) {
    return unavailable("security.mode is curve but this libzmq has no CURVE support");
  }
  SLUICE_ASSIGN_OR_RETURN(KeyFile k, read_key_file(cfg.key_file));
  SLUICE_ASSIGN_OR_RETURN(Members m, read_members_file(cfg.members_file));
  const Member* me = m.by_key(k.keys.public_key);
  if (!me) {
    return invalid_argument("secret key file " + cfg.key_file + " (" + k.identity +
                            ") is not a member of " + cfg.members_file);
  }
  // Versions are checked against the actors' sign keys: a members file without them (made before
  // version signatures) would leave every reader unable to load any version.
  for (const auto& a : m.all()) {
    if (a.role == kRoleActor && a.sign_key.empty()) {
      return invalid_argument("members file " + cfg.members_file + ": actor '" + a.identity +
                              "' has no sign_key, so no version could be checked (make the "
                              "job's keys again: sluice keys DIR, or sluice run)");
    }
  }
  if (me->role == kRoleActor && k.sign.public_key != me->sign_key) {
    return invalid_argument("secret key file " + cfg.key_file + " (" + k.identity + ") " +
                            (k.sign.secret_key.empty()
                                 ? std::string("has no signing key")
                                 : std::string("holds another signing key than its sign_key")) +
                            " in " + cfg.members_file + ": the actor could not sign versions");
  }
  Security s;
  s.mode = Security::Mode::kCurve;
  s.identity = me->identity;
  s.keys = k.keys;
  if (me->role == kRoleActor) s.sign = k.sign;
  s.members = std::make_shared<const Members>(std::move(m));
  log::info("{}: control plane authenticated (curve) as '{}', role {}", who, s.identity, me->role);
  return s;
}

void warn_plain(const std::string& what) {
  static std::once_flag once;
  std::call_once(once, [&] {
    log::warn(
        "{}: PLAIN MODE: the control plane is NOT authenticated or encrypted; anyone who can "
        "reach its ports can drive this role (security.mode=plain was configured)",
        what);
  });
}

void count_refusal(const std::string& reason, const std::string& peer, const std::string& detail) {
  process_metrics()
      .counter("sluice_refused_total", "requests refused, by reason", {{"reason", reason}})
      .inc();
  static std::mutex mu;
  static std::set<std::pair<std::string, std::string>> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (seen.size() >= kMaxRememberedRefusals) return;
    if (!seen.emplace(peer, reason).second) return;
  }
  log::warn(
      "refused {} ({}): {} (further refusals of this peer for this reason are counted in "
      "sluice_refused_total, not logged)",
      peer, reason, detail);
}

}  // namespace sluice::core
