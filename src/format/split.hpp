// How a tensor-parallel layout cuts one tensor (format/shard.hpp uses it to plan reads, and the
// manifest to check the shard checksums it declares): a split letter per tensor, and the bytes
// of one rank's part.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.hpp"
#include "format/tensor_spec.hpp"

namespace sluice::core {

enum class Split : char { kReplicated = '-', kRows = 'r', kColumns = 'c' };

// "rows", "columns" or "replicated".
const char* split_word(Split s);
// Whether `c` is one of Split's letters.
bool is_split_letter(char c);

// The bytes of one rank's part of `t` under `split` among `tp` ranks; invalid_argument naming the
// tensor when the split dimension is missing or tp does not divide it.
Result<std::uint64_t> split_bytes(const TensorSpec& t, Split split, std::uint32_t tp);

// The length of every rank's shard stream for tp_size and split letters over `tensors` (in
// manifest order); invalid_argument naming the tensor whose split does not tile it.
Result<std::uint64_t> shard_stream_bytes(std::span<const TensorSpec> tensors, std::uint32_t tp_size,
                                         std::string_view splits);

}  // namespace sluice::core
