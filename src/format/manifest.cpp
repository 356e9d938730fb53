#include "format/manifest.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <string_view>

#include "core/bytes.hpp"
#include "core/checksum.hpp"
#include "core/json_limits.hpp"
#include "format/safetensors.hpp"
#include "format/split.hpp"

namespace sluice::core {

std::uint64_t Manifest::chunk_count() const {
  // Not (total + chunk - 1) / chunk: that wraps for a total near 2^64 and undercounts.
  if (chunk_bytes == 0) return 0;
  return total_bytes / chunk_bytes + (total_bytes % chunk_bytes != 0 ? 1 : 0);
}

RegionLayout Manifest::layout() const {
  RegionLayout l;
  l.name = model + "@" + std::to_string(version);
  l.bytes = total_bytes;
  l.chunk_bytes = chunk_bytes;
  l.checksums = checksums;
  l.digests = digests;
  return l;
}

Status Manifest::validate() const {
  auto bad = [&](const std::string& what) {
    return invalid_argument("manifest " + (model.empty() ? std::string("?") : model) + "@" +
                            std::to_string(version) + ": " + what);
  };
  if (model.empty()) return bad("no model name");
  if (tensors.empty()) return bad("no tensors");
  if (chunk_bytes == 0) return bad("chunk size must be positive");
  std::set<std::string> names;
  std::uint64_t expect_offset = 0;
  for (const auto& t : tensors) {
    const std::string who = "tensor '" + t.name + "'";
    if (t.name.empty()) return bad("a tensor has no name");
    if (!names.insert(t.name).second) return bad(who + " appears twice");
    std::size_t elem = dtype_size(t.dtype);
    if (elem == 0) return bad(who + " has unknown dtype '" + t.dtype + "'");
    std::uint64_t count = 1;
    for (auto d : t.shape) {
      if (d != 0 && count > UINT64_MAX / d) return bad(who + ": shape overflows");
      count *= d;
    }
    if (count > UINT64_MAX / elem || count * elem != t.bytes) {
      return bad(who + " has " + std::to_string(t.bytes) + " bytes, its shape and dtype need " +
                 std::to_string(count * elem));
    }
    if (t.offset < expect_offset) {
      return bad(who + " at offset " + std::to_string(t.offset) +
                 " overlaps the tensor before it (which ends at " + std::to_string(expect_offset) +
                 ")");
    }
    if (t.offset > expect_offset) {
      return bad(who + " at offset " + std::to_string(t.offset) + " leaves a gap after offset " +
                 std::to_string(expect_offset));
    }
    if (t.bytes > UINT64_MAX - t.offset) return bad(who + ": offset + bytes overflows");
    expect_offset = t.offset + t.bytes;
  }
  if (expect_offset != total_bytes) {
    return bad("tensors add up to " + std::to_string(expect_offset) + " bytes, total_bytes says " +
               std::to_string(total_bytes));
  }
  if (checksums.size() != chunk_count()) {
    return bad(std::to_string(checksums.size()) + " checksums for " +
               std::to_string(chunk_count()) + " chunks");
  }
  if (!digests.empty() && digests.size() != chunk_count()) {
    return bad(std::to_string(digests.size()) + " digests for " + std::to_string(chunk_count()) +
               " chunks");
  }
  if (shards.size() > kMaxShardLayouts) {
    return bad(std::to_string(shards.size()) + " shard layouts (at most " +
               std::to_string(kMaxShardLayouts) + ")");
  }
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& sc = shards[i];
    const std::string who =
        "shard layout " + std::to_string(i) + " (tp_size " + std::to_string(sc.tp_size) + ")";
    if (sc.tp_size == 0 || sc.tp_size > kMaxTensorParallel) {
      return bad(who + ": tp_size must be 1.." + std::to_string(kMaxTensorParallel));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (shards[j].tp_size == sc.tp_size && shards[j].splits == sc.splits)
        return bad(who + " is declared twice");
    }
    auto stream = shard_stream_bytes(tensors, sc.tp_size, sc.splits);
    if (!stream.is_ok()) return bad(who + ": " + stream.status().message());
    const std::uint64_t per_rank = *stream / chunk_bytes + (*stream % chunk_bytes != 0 ? 1 : 0);
    if (sc.ranks.size() != sc.tp_size) {
      return bad(who + " has checksums for " + std::to_string(sc.ranks.size()) + " ranks");
    }
    for (std::size_t r = 0; r < sc.ranks.size(); ++r) {
      if (sc.ranks[r].size() != per_rank) {
        return bad(who + ": rank " + std::to_string(r) + " has " +
                   std::to_string(sc.ranks[r].size()) + " checksums for " +
                   std::to_string(per_rank) + " chunks");
      }
    }
    if (!sc.digests.empty()) {
      if (sc.digests.size() != sc.tp_size) {
        return bad(who + " has digests for " + std::to_string(sc.digests.size()) + " ranks");
      }
      for (std::size_t r = 0; r < sc.digests.size(); ++r) {
        if (sc.digests[r].size() != per_rank) {
          return bad(who + ": rank " + std::to_string(r) + " has " +
                     std::to_string(sc.digests[r].size()) + " digests for " +
                     std::to_string(per_rank) + " chunks");
        }
      }
    }
  }
  return {};
}

namespace {
// A string or list length, then the string.
void put_str(ByteWriter& w, const std::string& s) {
  w.u64(s.size()).put(s);
}
void put_digest(ByteWriter& w, const Digest& d) {
  w.put(d.bytes.data(), d.bytes.size());
}
}  // namespace

std::string Manifest::signed_bytes() const {
  // v1 without shard checksums: the bytes every manifest before them was signed over. v3 with
  // digests.
  std::string out = !digests.empty() ? "sluice.manifest.v3"
                    : shards.empty() ? "sluice.manifest.v1"
                                     : "sluice.manifest.v2";
  std::size_t n = 72 + model.size() + 8 * checksums.size() + 32 * digests.size();
  for (const auto& t : tensors)
    n += 48 + t.name.size() + t.dtype.size() + 8 * t.shape.size();
  out.reserve(out.size() + n);
  ByteWriter w(out);
  put_str(w, model);
  w.u64(version).u64(total_bytes).u64(chunk_bytes).u64(tensors.size());
  for (const auto& t : tensors) {
    put_str(w, t.name);
    put_str(w, t.dtype);
    w.u64(t.shape.size());
    for (auto d : t.shape)
      w.u64(d);
    w.u64(t.offset).u64(t.bytes);
  }
  w.u64(checksums.size());
  for (auto c : checksums)
    w.u64(c);
  if (!digests.empty()) {
    w.u64(digests.size());
    for (const auto& d : digests)
      put_digest(w, d);
  } else if (shards.empty()) {
    return out;
  }
  w.u64(shards.size());
  for (const auto& sc : shards) {
    w.u64(sc.tp_size);
    put_str(w, sc.splits);
    w.u64(sc.ranks.size());
    for (const auto& rank : sc.ranks) {
      w.u64(rank.size());
      for (auto c : rank)
        w.u64(c);
    }
    if (digests.empty()) continue;  // v2: no shard digests either
    w.u64(sc.digests.size());
    for (const auto& rank : sc.digests) {
      w.u64(rank.size());
      for (const auto& d : rank)
        put_digest(w, d);
    }
  }
  return out;
}

Status sign_manifest(Manifest& m, const SignKeyPair& key) {
  SLUICE_ASSIGN_OR_RETURN(std::string sig, sign_message(m.signed_bytes(), key));
  m.signature = kSignaturePrefix + sig;
  return {};
}

Status check_signature(const Manifest& m, const std::vector<std::string>& signers) {
  const std::string what = "manifest " + m.model + "@" + std::to_string(m.version);
  if (m.signature.empty()) {
    return permission_denied(what +
                             " is not signed: a version must carry the actor's signature (a peer "
                             "older than signed manifests, or one that is not the actor)");
  }
  const std::string_view prefix = kSignaturePrefix;
  if (m.signature.compare(0, prefix.size(), prefix) != 0) {
    return permission_denied(what + " has a signature of an unknown scheme (expected " +
                             std::string(prefix) + ")");
  }
  const std::string bytes = m.signed_bytes();
  const std::string_view sig = std::string_view(m.signature).substr(prefix.size());
  for (const auto& key : signers) {
    if (signature_valid(bytes, sig, key)) return {};
  }
  return permission_denied(
      what + ": the signature is not an actor's signature of this manifest" +
      (signers.empty() ? std::string(" (no actor sign_key is known)") : std::string()));
}

Status check_version_signature(const Manifest& m, const Security& security) {
  if (!security.versions_signed()) return {};
  SLUICE_TRY(check_signature(m, security.version_signers()));
  if (m.digests.empty()) {
    return permission_denied("manifest " + m.model + "@" + std::to_string(m.version) +
                             " has no chunk digests: its signature covers only XXH3 checksums, "
                             "which do not bind the bytes (a version from before digests)");
  }
  return {};
}

nlohmann::json Manifest::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["version"] = version;
  j["total_bytes"] = total_bytes;
  j["chunk_bytes"] = chunk_bytes;
  j["checksums"] = checksums;
  if (!digests.empty()) {
    auto& list = j["digests"] = nlohmann::json::array();
    for (const auto& d : digests)
      list.push_back(digest_hex(d));
  }
  j["tensors"] = nlohmann::json::array();
  for (const auto& t : tensors) {
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", t.dtype},
                            {"shape", t.shape},
                            {"offset", t.offset},
                            {"bytes", t.bytes}});
  }
  if (!shards.empty()) {
    j["shards"] = nlohmann::json::array();
    for (const auto& sc : shards) {
      nlohmann::json e = {{"tp_size", sc.tp_size}, {"splits", sc.splits}, {"checksums", sc.ranks}};
      if (!sc.digests.empty()) {
        auto& ranks = e["digests"] = nlohmann::json::array();
        for (const auto& rank : sc.digests) {
          auto list = nlohmann::json::array();
          for (const auto& d : rank)
            list.push_back(digest_hex(d));
          ranks.push_back(std::move(list));
        }
      }
      j["shards"].push_back(std::move(e));
    }
  }
  if (!signature.empty()) j["signature"] = signature;
  return j;
}

namespace {

namespace field = json_field;
using Json = nlohmann::json;

// from_json takes no limits: the decoder of a message that carries a manifest bounds it first
// (the weight store's counts its tensors before, and checks its size and chunks after).
constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();

// "manifest: a digest" (parse_digest's message names it) from a string at j.
Status read_digest(const Json& j, std::string_view what, const char* key, const std::string& name,
                   Digest& out) {
  if (!j.is_string()) return field::error(what, key, "holds " + name + " that is not a string");
  SLUICE_ASSIGN_OR_RETURN(out, parse_digest(j.get_ref<const std::string&>(), "manifest: " + name));
  return {};
}

Status read_tensor(const Json& j, std::size_t i, TensorSpec& t) {
  const std::string entry = "manifest: tensors[" + std::to_string(i) + "]";
  SLUICE_TRY(field::object(j, entry));
  SLUICE_TRY(field::string(j, entry, "name", t.name));
  const std::string what = "manifest: tensor '" + t.name + "'";
  SLUICE_TRY(field::string(j, what, "dtype", t.dtype));
  SLUICE_TRY(field::u64_array(j, what, "shape", t.shape));
  SLUICE_TRY(field::u64(j, what, "offset", t.offset));
  SLUICE_TRY(field::u64(j, what, "bytes", t.bytes));
  return {};
}

// One declared layout; counts are checked against the tensors and tp_size before the lists are
// read, validate() checks the rest.
Status read_shards(const Json& j, std::size_t tensors, ShardChecksums& sc) {
  constexpr std::string_view what = "manifest: a shard layout";
  SLUICE_TRY(field::object(j, what));
  std::uint64_t tp_size = 0;
  if (!field::u64_at_most(j, what, "tp_size", kMaxTensorParallel, tp_size).is_ok()) {
    return field::error(what, "tp_size",
                        "must be an integer 1.." + std::to_string(kMaxTensorParallel));
  }
  sc.tp_size = static_cast<std::uint32_t>(tp_size);
  SLUICE_TRY(field::string(j, what, "splits", sc.splits));
  if (sc.splits.size() != tensors) {
    return field::error(what, "splits", "must be a string of one letter per tensor");
  }
  const Json* ranks = nullptr;
  if (!field::array(j, what, "checksums", sc.tp_size, ranks).is_ok() ||
      ranks->size() != sc.tp_size) {
    return field::error(what, "checksums", "must be one array per rank");
  }
  SLUICE_TRY(
      field::list(j, what, "checksums", sc.tp_size, sc.ranks,
                  [&](const Json& rank, std::size_t, std::vector<std::uint64_t>& out) -> Status {
                    if (!rank.is_array())
                      return field::error(what, "checksums", "must hold arrays");
                    out.reserve(rank.size());
                    for (const auto& c : rank) {
                      if (!c.is_number_unsigned())
                        return field::error(what, "checksums", "must hold non-negative integers");
                      out.push_back(c.get<std::uint64_t>());
                    }
                    return {};
                  }));
  if (!j.contains("digests")) return {};
  // One list per rank, each as long as that rank's checksums: sized before parsing.
  const Json* digests = nullptr;
  if (!field::array(j, what, "digests", sc.tp_size, digests).is_ok() ||
      digests->size() != sc.ranks.size()) {
    return field::error(what, "digests", "must be one array per rank");
  }
  return field::list(
      j, what, "digests", sc.tp_size, sc.digests,
      [&](const Json& rank, std::size_t r, std::vector<Digest>& out) -> Status {
        if (!rank.is_array() || rank.size() != sc.ranks[r].size()) {
          return field::error(what, "digests", "must be one per rank checksum");
        }
        out.resize(rank.size());
        for (std::size_t k = 0; k < rank.size(); ++k)
          SLUICE_TRY(read_digest(rank[k], what, "digests", "a shard digest", out[k]));
        return {};
      });
}

// "ed25519:" and 128 lowercase hex characters.
bool signature_form(const std::string& text) {
  constexpr std::size_t kHexChars = 128;
  const std::string_view prefix = kSignaturePrefix;
  return text.size() == prefix.size() + kHexChars && text.compare(0, prefix.size(), prefix) == 0 &&
         std::all_of(text.begin() + static_cast<std::ptrdiff_t>(prefix.size()), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The fields in the order to_json writes them; unknown keys are ignored, as in every message.
Status read_manifest(const Json& j, Manifest& m) {
  constexpr std::string_view what = "manifest";
  SLUICE_TRY(field::object(j, what));
  SLUICE_TRY(field::string(j, what, "model", m.model));
  SLUICE_TRY(field::u64(j, what, "version", m.version));
  SLUICE_TRY(field::u64(j, what, "total_bytes", m.total_bytes));
  SLUICE_TRY(field::u64(j, what, "chunk_bytes", m.chunk_bytes));
  SLUICE_TRY(field::u64_array(j, what, "checksums", m.checksums));
  if (j.contains("digests")) {
    // Counted against the checksums before any is parsed; validate() checks against the chunks.
    const Json* ds = nullptr;
    if (!field::array(j, what, "digests", m.checksums.size(), ds).is_ok() ||
        ds->size() != m.checksums.size()) {
      return field::error(what, "digests", "must be an array of one digest per checksum");
    }
    SLUICE_TRY(field::list(j, what, "digests", ds->size(), m.digests,
                           [&](const Json& d, std::size_t, Digest& out) {
                             return read_digest(d, what, "digests", "a digest", out);
                           }));
  }
  SLUICE_TRY(field::list(j, what, "tensors", kUnbounded, m.tensors, read_tensor));
  if (j.contains("shards")) {
    // Sizes are checked before anything is kept; validate() checks the rest.
    SLUICE_TRY(field::list(j, what, "shards", kMaxShardLayouts, m.shards,
                           [&](const Json& e, std::size_t, ShardChecksums& sc) {
                             return read_shards(e, m.tensors.size(), sc);
                           }));
  }
  if (j.contains("signature")) {
    if (!field::string(j, what, "signature", m.signature).is_ok() || !signature_form(m.signature)) {
      return field::error(
          what, "signature",
          "must be \"" + std::string(kSignaturePrefix) + "\" and 128 lowercase hex characters");
    }
  }
  return {};
}

}  // namespace

Result<Manifest> Manifest::from_json(const nlohmann::json& j) {
  Manifest m;
  // json_field's readers speak protocol_error, a peer's mistake; here, as in validate(), a
  // manifest that does not decode is an invalid argument (the store's decoder turns it back into
  // a malformed message).
  if (Status s = read_manifest(j, m); !s.is_ok()) return invalid_argument(s.message());
  SLUICE_TRY(m.validate());
  return m;
}

Result<Manifest> make_manifest(std::string model, std::uint64_t version,
                               std::vector<TensorSpec> tensors, const std::uint8_t* data,
                               std::uint64_t total_bytes, std::uint64_t chunk_bytes) {
  Manifest m;
  m.model = std::move(model);
  m.version = version;
  m.tensors = std::move(tensors);
  m.total_bytes = total_bytes;
  m.chunk_bytes = chunk_bytes;
  if (chunk_bytes > 0) {
    for (std::uint64_t i = 0; i < m.chunk_count(); ++i) {
      std::uint64_t off = i * chunk_bytes;
      const std::uint64_t n = std::min(chunk_bytes, total_bytes - off);
      m.checksums.push_back(chunk_checksum(data + off, n));
      m.digests.push_back(chunk_digest(data + off, n));
    }
  }
  SLUICE_TRY(m.validate());
  return m;
}

}  // namespace sluice::core
