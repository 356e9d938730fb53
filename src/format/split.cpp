#include "format/split.hpp"

#include <string>
#include <vector>

namespace sluice::core {

namespace {

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

const char* split_word(Split s) {
  switch (s) {
    case Split::kRows:
      return "rows";
    case Split::kColumns:
      return "columns";
    case Split::kReplicated:
      break;
  }
  return "replicated";
}

bool is_split_letter(char c) {
  return c == static_cast<char>(Split::kRows) || c == static_cast<char>(Split::kColumns) ||
         c == static_cast<char>(Split::kReplicated);
}

Result<std::uint64_t> split_bytes(const TensorSpec& t, Split split, std::uint32_t tp) {
  if (split == Split::kReplicated) return t.bytes;
  const std::size_t dim = split == Split::kRows ? 0 : 1;
  const std::string who = "tensor '" + t.name + "' (shape " + shape_text(t.shape) + ")";
  if (t.shape.size() <= dim) {
    return invalid_argument(who + " has no dim " + std::to_string(dim) + " to split into " +
                            split_word(split));
  }
  if (t.shape[dim] % tp != 0) {
    return invalid_argument(who + ": tp_size " + std::to_string(tp) + " does not divide dim " +
                            std::to_string(dim) + " (" + std::to_string(t.shape[dim]) +
                            "), so the layout does not tile it");
  }
  return t.bytes / tp;
}

Result<std::uint64_t> shard_stream_bytes(std::span<const TensorSpec> tensors, std::uint32_t tp_size,
                                         std::string_view splits) {
  if (tp_size == 0) return invalid_argument("tp_size must be positive");
  if (splits.size() != tensors.size()) {
    return invalid_argument(std::to_string(splits.size()) + " splits for " +
                            std::to_string(tensors.size()) + " tensors");
  }
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!is_split_letter(splits[i])) {
      return invalid_argument("tensor '" + tensors[i].name + "' has an unknown split '" +
                              std::string(1, splits[i]) + "'");
    }
    SLUICE_ASSIGN_OR_RETURN(std::uint64_t b,
                            split_bytes(tensors[i], static_cast<Split>(splits[i]), tp_size));
    total += b;
  }
  return total;
}

}  // namespace sluice::core
