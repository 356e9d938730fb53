// A strict reader and writer for the safetensors format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N, N bytes
// of UTF-8 JSON header, then the data buffer the header indexes.
//
// The reader accepts only files that follow the spec exactly: every tensor's byte range matches its
// dtype and shape, ranges neither overlap nor leave gaps, and the buffer ends where the last tensor
// ends. A header that disagrees with the file is rejected with a message naming the tensor and
// field, never repaired.
//
// Error codes: kDataLoss when the file is shorter than its header says (truncated file, header
// length or tensor end past the end); kInvalidArgument for everything malformed in the header or
// in the writer's input; kNotFound when a file cannot be opened.
//
// Thread safety: pure functions over caller-owned data; safe to call from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace sluice::core {

// The largest header accepted. The reference implementation uses the same bound; it keeps a
// corrupted length field from making the reader allocate gigabytes.
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100ULL << 20;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                 // as spelled in the file: "F32", "BF16", ...
  std::vector<std::uint64_t> shape;  // empty for a scalar
  std::uint64_t begin = 0;           // byte range [begin, end) within the data buffer
  std::uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // sorted by begin offset (zero-size ones first on ties)
  std::map<std::string, std::string> metadata;  // the "__metadata__" object, if any
  std::uint64_t header_bytes = 0;               // N, padding included
  std::uint64_t data_offset = 0;                // 8 + N: where the data buffer starts in the file
  std::uint64_t data_bytes = 0;                 // file size - data_offset
};

// Bytes per element of a dtype name, 0 if unknown. Knows the whole-byte dtypes of the spec: BOOL,
// U8, I8, F8_E4M3, F8_E5M2, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64, C64.
// Sub-byte dtypes (F4, F6_*) are not supported and report 0.
std::size_t dtype_size(std::string_view dtype);

// Parses and validates the header of a file of `file_size` bytes. `prefix` holds the first
// `prefix_len` bytes of the file, which must cover the 8-byte length and the whole header (the
// data buffer need not be present). Checks, each failing with a message that names the tensor and
// field: the length field against the file size and kSafetensorsMaxHeaderBytes; the header is a
// UTF-8 JSON object starting with '{' (trailing spaces allowed) without duplicate keys at any
// level; each entry has exactly dtype (a known one), shape (non-negative integers) and
// data_offsets ([begin, end], begin <= end, end within the data buffer); end - begin equals
// product(shape) * dtype_size without overflow; the ranges tile the data buffer exactly (no
// overlap, no gap, no trailing bytes); "__metadata__" maps strings to strings; names are not empty.
[[nodiscard]] Result<SafetensorsHeader> parse_safetensors_header(const std::uint8_t* prefix,
                                                                 std::size_t prefix_len,
                                                                 std::uint64_t file_size);

struct SafetensorsFile {
  SafetensorsHeader header;
  std::vector<std::uint8_t> data;  // the data buffer; tensor t is data[t.begin, t.end)
};

// Reads the whole file at `path` into memory. The header is validated before the data buffer is
// allocated, so a corrupt length cannot cause a huge allocation.
[[nodiscard]] Result<SafetensorsFile> read_safetensors(const std::string& path);

struct SafetensorsInput {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  const std::uint8_t* data = nullptr;  // borrowed; read during the call only
  std::uint64_t bytes = 0;
};

// Writes `tensors` to `path` in the given order, their data contiguous with no gaps, the header
// padded with spaces so the data buffer starts at a multiple of 8 bytes. Fails without touching
// `path` on bad input: an empty, duplicate or "__metadata__" name, a name or metadata string that
// is not UTF-8, an unknown dtype, bytes != product(shape) * dtype_size, or null data with bytes >
// 0. The file is written beside `path` and renamed over it, so readers never see a partial file.
[[nodiscard]] Status write_safetensors(const std::string& path,
                                       const std::vector<SafetensorsInput>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

}  // namespace sluice::core
