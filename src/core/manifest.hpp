// A version's manifest: the ordered tensors of one model version (name, dtype, shape, offset,
// bytes), its total size, its chunk size and a checksum per chunk. Manifests travel as JSON in
// control messages; the weight bytes themselves live only in holders' registered memory.
//
// Thread safety: plain values.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/region_server.hpp"
#include "core/status.hpp"

namespace sluice::core {

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors names: F32, BF16, F16, I64, U8, ...
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;  // from the start of the version's bytes
  std::uint64_t bytes = 0;
};

struct Manifest {
  std::string model;
  std::uint64_t version = 0;
  std::vector<TensorSpec> tensors;  // in offset order
  std::uint64_t total_bytes = 0;
  std::uint64_t chunk_bytes = 0;
  std::vector<std::uint64_t> checksums;  // one per chunk (XXH3)

  std::uint64_t chunk_count() const;
  // The chunk layout, for reading the version with the transfer engine.
  RegionLayout layout() const;

  // Checks that the manifest is self-consistent: a model name; tensors with unique, non-empty
  // names and known dtypes; bytes == product(shape) x dtype size; tensors in offset order, not
  // overlapping, covering [0, total_bytes) with no gap; a positive chunk size; one checksum per
  // chunk. The error names the first problem found (and the tensor).
  Status validate() const;

  nlohmann::json to_json() const;
  // Parses and validates.
  static Result<Manifest> from_json(const nlohmann::json& j);
};

// Builds the manifest of `bytes` laid out as `tensors` (their offsets and sizes must already be
// set) and computes the chunk checksums. Validates the result.
Result<Manifest> make_manifest(std::string model, std::uint64_t version,
                               std::vector<TensorSpec> tensors, const std::uint8_t* data,
                               std::uint64_t total_bytes, std::uint64_t chunk_bytes);

}  // namespace sluice::core
