// One tensor of a version: its name, dtype, shape and where its bytes lie in the version. Apart
// from the manifest (format/manifest.hpp) so that what the manifest uses about tensors
// (format/split.hpp) need not include the manifest.
//
// Thread safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::core {

struct TensorSpec {
  std::string name;
  std::string dtype;  // safetensors names: F32, BF16, F16, I64, U8, ...
  std::vector<std::uint64_t> shape;
  std::uint64_t offset = 0;  // from the start of the version's bytes
  std::uint64_t bytes = 0;
};

}  // namespace sluice::core
