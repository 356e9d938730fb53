// A version's manifest: the ordered tensors of one model version (name, dtype, shape, offset,
// bytes), its total size, its chunk size, and a checksum and a digest per chunk. Manifests travel
// as JSON in control messages; the weight bytes themselves live only in holders' registered
// memory.
//
// A version is something only the actor can make: the actor signs each manifest (Ed25519, its
// key in the job's members file, wire/security.hpp) over signed_bytes(), one canonical byte form
// of everything a reader trusts: the model name, the version number, the tensors, the sizes, the
// chunk size, every chunk checksum and every chunk digest (SHA-256, core/checksum.hpp). Stores
// accept, and readers load, only a manifest whose signature verifies against an actor's sign_key
// and that carries digests (check_version_signature); readers then verify every chunk against
// its signed digest, so no byte the actor did not publish reaches a tensor. The checksums (XXH3)
// are not cryptographic and are kept only as a check against accidents.
//
// Thread safety: plain values.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "format/tensor_spec.hpp"
#include "wire/region_server.hpp"
#include "wire/security.hpp"

namespace sluice::core {

// The checksums of one inference layout's shards, which the actor declares (format/shard.hpp): for
// a tensor-parallel size and one split per tensor, rank r's shard is the bytes it loads, tensor
// after tensor in manifest order, and ranks[r] holds one XXH3 checksum per chunk_bytes of that
// stream (the last one shorter). A rollout of that layout reads only its shard's bytes and still
// verifies every one of them; one of an undeclared layout reads whole chunks instead.
struct ShardChecksums {
  std::uint32_t tp_size = 0;  // 1..kMaxTensorParallel
  // One letter per tensor, in manifest order: 'r' split along dim 0 (rows), 'c' along dim 1
  // (columns), '-' replicated (format/shard.hpp: Split).
  std::string splits;
  std::vector<std::vector<std::uint64_t>> ranks;  // tp_size lists
  // Empty, or tp_size lists of one SHA-256 per chunk of that rank's stream (the actor computes
  // both; what a shard read is verified against when present).
  std::vector<std::vector<Digest>> digests;
};

// Bounds a manifest's shard checksums (decoded from peers): layouts declared, ranks per layout.
inline constexpr std::size_t kMaxShardLayouts = 16;
inline constexpr std::uint32_t kMaxTensorParallel = 1024;

struct Manifest {
  std::string model;
  std::uint64_t version = 0;
  std::vector<TensorSpec> tensors;  // in offset order
  std::uint64_t total_bytes = 0;
  std::uint64_t chunk_bytes = 0;
  std::vector<std::uint64_t> checksums;  // one per chunk (XXH3)
  // One SHA-256 per chunk; empty only in a manifest made before digests (refused where versions
  // are signed).
  std::vector<Digest> digests;
  // Per inference layout the actor declared (none: only whole chunks can be verified).
  std::vector<ShardChecksums> shards;
  // The actor's signature of signed_bytes(): kSignaturePrefix and 128 lowercase hex characters
  // (Ed25519). Empty: unsigned (plain mode, or a peer older than signed manifests). Not itself
  // part of what is signed.
  std::string signature;

  std::uint64_t chunk_count() const;
  // The chunk layout, for reading the version with the transfer engine.
  RegionLayout layout() const;

  // Checks that the manifest is self-consistent: a model name; tensors with unique, non-empty
  // names and known dtypes; bytes == product(shape) x dtype size; tensors in offset order, not
  // overlapping, covering [0, total_bytes) with no gap; a positive chunk size; one checksum per
  // chunk; no digests or one per chunk; shard checksums (at most kMaxShardLayouts, no layout twice)
  // whose splits tile their tensors and whose counts match the shards' sizes. The error names the
  // first problem found (and the tensor).
  Status validate() const;

  // The canonical bytes a signature covers: a format tag, then every field in a fixed order,
  // integers as 8 bytes little-endian, strings and lists preceded by their length. Two
  // manifests have the same signed bytes only when they are the same manifest. The tag is
  // "sluice.manifest.v1" without shard checksums (the bytes every earlier manifest was signed
  // over, so those stay valid), "sluice.manifest.v2" with them, which follow the chunk
  // checksums. A peer older than v2 ignores "shards" and then finds the signature invalid: it
  // refuses such a version rather than misreading it. "sluice.manifest.v3" when the manifest has
  // digests: the chunk checksums, then the digests (32 bytes each), then the shard layouts
  // (their count first, which may be 0).
  std::string signed_bytes() const;

  // The JSON form; "signature" only when signed.
  nlohmann::json to_json() const;
  // Parses and validates. An optional "signature" must be kSignaturePrefix and 128 lowercase
  // hex characters; whether it verifies is check_version_signature's question.
  static Result<Manifest> from_json(const nlohmann::json& j);
};

// The scheme tag of Manifest::signature: another scheme is refused, not misread.
inline constexpr const char* kSignaturePrefix = "ed25519:";

// Signs `m` with the actor's key pair: sets m.signature.
Status sign_manifest(Manifest& m, const SignKeyPair& key);
// ok when m.signature verifies against one of `signers` (the actors' sign keys, hex);
// permission_denied naming the version otherwise: no signature (an older peer, or one that is not
// the actor), a signature of another scheme, or one that no actor made for exactly this manifest.
Status check_signature(const Manifest& m, const std::vector<std::string>& signers);
// The check every store and reader makes before a version can be kept or loaded: in curve mode
// check_signature against the members' actors; in plain mode nothing is checked (ok).
Status check_version_signature(const Manifest& m, const Security& security);

// Builds the manifest of `bytes` laid out as `tensors` (their offsets and sizes must already be
// set) and computes the chunk checksums and digests. Validates the result.
Result<Manifest> make_manifest(std::string model, std::uint64_t version,
                               std::vector<TensorSpec> tensors, const std::uint8_t* data,
                               std::uint64_t total_bytes, std::uint64_t chunk_bytes);

}  // namespace sluice::core
