#include "format/manifest.hpp"

#include <algorithm>
#include <set>

#include "core/checksum.hpp"
#include "format/safetensors.hpp"
#include "format/shard.hpp"

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
    auto stream = shard_stream_bytes(*this, sc.tp_size, sc.splits);
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
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
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
  put_str(out, model);
  put_u64(out, version);
  put_u64(out, total_bytes);
  put_u64(out, chunk_bytes);
  put_u64(out, tensors.size());
  for (const auto& t : tensors) {
    put_str(out, t.name);
    put_str(out, t.dtype);
    put_u64(out, t.shape.size());
    for (auto d : t.shape)
      put_u64(out, d);
    put_u64(out, t.offset);
    put_u64(out, t.bytes);
  }
  put_u64(out, checksums.size());
  for (auto c : checksums)
    put_u64(out, c);
  if (!digests.empty()) {
    put_u64(out, digests.size());
    for (const auto& d : digests)
      out.append(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
  } else if (shards.empty()) {
    return out;
  }
  put_u64(out, shards.size());
  for (const auto& sc : shards) {
    put_u64(out, sc.tp_size);
    put_str(out, sc.splits);
    put_u64(out, sc.ranks.size());
    for (const auto& rank : sc.ranks) {
      put_u64(out, rank.size());
      for (auto c : rank)
        put_u64(out, c);
    }
    if (digests.empty()) continue;  // v2: no shard digests either
    put_u64(out, sc.digests.size());
    for (const auto& rank : sc.digests) {
      put_u64(out, rank.size());
      for (const auto& d : rank)
        out.append(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
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

Result<Manifest> Manifest::from_json(const nlohmann::json& j) {
  auto bad = [](const std::string& what) { return invalid_argument("manifest: " + what); };
  if (!j.is_object()) return bad("not a JSON object");
  auto u64 = [&](const nlohmann::json& o, const char* key, std::uint64_t& out) -> Status {
    auto it = o.find(key);
    if (it == o.end() || !it->is_number_unsigned()) {
      return bad(std::string("'") + key + "' must be a non-negative integer");
    }
    out = it->get<std::uint64_t>();
    return {};
  };
  Manifest m;
  if (!j.contains("model") || !j["model"].is_string()) return bad("'model' must be a string");
  m.model = j["model"].get<std::string>();
  SLUICE_TRY(u64(j, "version", m.version));
  SLUICE_TRY(u64(j, "total_bytes", m.total_bytes));
  SLUICE_TRY(u64(j, "chunk_bytes", m.chunk_bytes));
  if (!j.contains("checksums") || !j["checksums"].is_array())
    return bad("'checksums' must be an array");
  for (const auto& c : j["checksums"]) {
    if (!c.is_number_unsigned()) return bad("a checksum is not a non-negative integer");
    m.checksums.push_back(c.get<std::uint64_t>());
  }
  if (auto ds = j.find("digests"); ds != j.end()) {
    // Counted against the checksums before any is parsed; validate() checks against the chunks.
    if (!ds->is_array() || ds->size() != m.checksums.size())
      return bad("'digests' must be an array of one digest per checksum");
    m.digests.reserve(ds->size());
    for (const auto& d : *ds) {
      if (!d.is_string()) return bad("a digest is not a string");
      SLUICE_ASSIGN_OR_RETURN(Digest parsed,
                              parse_digest(d.get_ref<const std::string&>(), "manifest: a digest"));
      m.digests.push_back(parsed);
    }
  }
  if (!j.contains("tensors") || !j["tensors"].is_array()) return bad("'tensors' must be an array");
  for (const auto& t : j["tensors"]) {
    if (!t.is_object()) return bad("a tensor is not an object");
    TensorSpec s;
    if (!t.contains("name") || !t["name"].is_string()) return bad("a tensor has no 'name' string");
    s.name = t["name"].get<std::string>();
    if (!t.contains("dtype") || !t["dtype"].is_string())
      return bad("tensor '" + s.name + "' has no 'dtype' string");
    s.dtype = t["dtype"].get<std::string>();
    if (!t.contains("shape") || !t["shape"].is_array())
      return bad("tensor '" + s.name + "' has no 'shape' array");
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) return bad("tensor '" + s.name + "' has a bad shape entry");
      s.shape.push_back(d.get<std::uint64_t>());
    }
    SLUICE_TRY(u64(t, "offset", s.offset).with_context("tensor '" + s.name + "'"));
    SLUICE_TRY(u64(t, "bytes", s.bytes).with_context("tensor '" + s.name + "'"));
    m.tensors.push_back(std::move(s));
  }
  if (auto sh = j.find("shards"); sh != j.end()) {
    // Sizes are checked before anything is kept; validate() checks the rest.
    if (!sh->is_array() || sh->size() > kMaxShardLayouts) {
      return bad("'shards' must be an array of at most " + std::to_string(kMaxShardLayouts) +
                 " layouts");
    }
    for (const auto& e : *sh) {
      if (!e.is_object()) return bad("a shard layout is not an object");
      ShardChecksums sc;
      auto tp = e.find("tp_size");
      if (tp == e.end() || !tp->is_number_unsigned() ||
          tp->get<std::uint64_t>() > kMaxTensorParallel) {
        return bad("a shard layout's 'tp_size' must be an integer 1.." +
                   std::to_string(kMaxTensorParallel));
      }
      sc.tp_size = tp->get<std::uint32_t>();
      auto sp = e.find("splits");
      if (sp == e.end() || !sp->is_string() ||
          sp->get_ref<const std::string&>().size() != m.tensors.size()) {
        return bad("a shard layout's 'splits' must be a string of one letter per tensor");
      }
      sc.splits = sp->get<std::string>();
      auto cs = e.find("checksums");
      if (cs == e.end() || !cs->is_array() || cs->size() != sc.tp_size) {
        return bad("a shard layout's 'checksums' must be one array per rank");
      }
      for (const auto& rank : *cs) {
        if (!rank.is_array()) return bad("a shard layout's rank checksums are not an array");
        std::vector<std::uint64_t> list;
        list.reserve(rank.size());
        for (const auto& c : rank) {
          if (!c.is_number_unsigned()) return bad("a shard checksum is not a non-negative integer");
          list.push_back(c.get<std::uint64_t>());
        }
        sc.ranks.push_back(std::move(list));
      }
      if (auto ds = e.find("digests"); ds != e.end()) {
        // One list per rank, each as long as that rank's checksums: sized before parsing.
        if (!ds->is_array() || ds->size() != sc.ranks.size())
          return bad("a shard layout's 'digests' must be one array per rank");
        for (std::size_t r = 0; r < ds->size(); ++r) {
          const auto& rank = (*ds)[r];
          if (!rank.is_array() || rank.size() != sc.ranks[r].size())
            return bad("a shard layout's rank digests must be one per rank checksum");
          std::vector<Digest> list;
          list.reserve(rank.size());
          for (const auto& d : rank) {
            if (!d.is_string()) return bad("a shard digest is not a string");
            SLUICE_ASSIGN_OR_RETURN(Digest parsed, parse_digest(d.get_ref<const std::string&>(),
                                                                "manifest: a shard digest"));
            list.push_back(parsed);
          }
          sc.digests.push_back(std::move(list));
        }
      }
      m.shards.push_back(std::move(sc));
    }
  }
  if (auto s = j.find("signature"); s != j.end()) {
    constexpr std::size_t kHexChars = 128;
    const std::string_view prefix = kSignaturePrefix;
    bool ok = s->is_string();
    if (ok) {
      const auto& text = s->get_ref<const std::string&>();
      ok = text.size() == prefix.size() + kHexChars &&
           text.compare(0, prefix.size(), prefix) == 0 &&
           std::all_of(text.begin() + static_cast<std::ptrdiff_t>(prefix.size()), text.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
      if (ok) m.signature = text;
    }
    if (!ok) {
      return bad("'signature' must be \"" + std::string(prefix) +
                 "\" and 128 lowercase hex characters");
    }
  }
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
