#include "format/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <system_error>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/bytes.hpp"

namespace sluice::core {

namespace {

using Json = nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

std::string in_quotes(std::string_view s) {
  return "'" + std::string(s) + "'";
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// "an integer -3", "a string \"x\"": what a message shows of an offending value, kept short so a
// hostile header cannot blow up the message.
std::string describe(const Json& j) {
  if (j.is_null()) return "null";
  const char* kind = j.is_boolean()        ? "a boolean"
                     : j.is_number_float() ? "a number with a fraction or exponent"
                     : j.is_number()       ? "an integer"
                     : j.is_string()       ? "a string"
                     : j.is_array()        ? "an array"
                                           : "an object";
  std::string text = j.dump();
  if (text.size() > 40) {
    std::size_t cut = 37;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
      --cut;  // UTF-8
    text = text.substr(0, cut) + "...";
  }
  return kind + (" " + text);
}

// Bytes of a tensor of `dtype` and `shape`; every failure names `where`.
Result<std::uint64_t> tensor_bytes(const std::string& where, std::string_view dtype,
                                   const std::vector<std::uint64_t>& shape) {
  std::uint64_t bytes = dtype_size(dtype);
  if (bytes == 0) return invalid_argument(where + ": unknown dtype " + in_quotes(dtype));
  // A zero dim makes the tensor empty however large the other dims are; checking first keeps
  // [2^40, 2^40, 0] from being reported as an overflow.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return std::uint64_t{0};
  for (std::uint64_t dim : shape) {
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      return invalid_argument(where + ": shape " + shape_string(shape) + " of " +
                              std::string(dtype) + " overflows 64-bit byte counts");
    }
  }
  return bytes;
}

Result<std::uint64_t> as_u64(const Json& j, const std::string& what) {
  if (j.is_number_unsigned()) return j.get<std::uint64_t>();
  if (j.is_number_integer() && j.get<std::int64_t>() >= 0) return j.get<std::uint64_t>();
  return invalid_argument(what + " must be a non-negative integer, got " + describe(j));
}

// Parses JSON and reports the first key that repeats within one object: nlohmann keeps the last
// duplicate silently, which would let a header hide a tensor or a field.
Result<Json> parse_without_duplicates(const std::uint8_t* begin, const std::uint8_t* end) {
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> stack;
  std::string duplicate;
  auto on_event = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      stack.emplace_back();
    } else if (event == Json::parse_event_t::object_end && !stack.empty()) {
      stack.pop_back();
    } else if (event == Json::parse_event_t::key && !stack.empty() && duplicate.empty()) {
      std::string key = parsed.get<std::string>();
      if (!stack.back().keys.insert(key).second) {
        std::string where;
        for (std::size_t i = 0; i + 1 < stack.size(); ++i) {
          where += (where.empty() ? "" : ".") + stack[i].last_key;
        }
        duplicate = stack.size() == 1 && key != kMetadataKey
                        ? "duplicate tensor name " + in_quotes(key)
                        : "duplicate key " + in_quotes(key) +
                              (where.empty() ? std::string() : " in " + in_quotes(where));
      }
      stack.back().last_key = std::move(key);
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(begin, end, on_event);
  } catch (const Json::exception& e) {
    return invalid_argument(std::string("header is not valid UTF-8 JSON: ") + e.what());
  }
  if (!duplicate.empty()) return invalid_argument("header has a " + duplicate);
  return j;
}

Result<SafetensorsTensor> parse_entry(const std::string& name, const Json& entry,
                                      std::uint64_t data_bytes) {
  const std::string where = "tensor " + in_quotes(name);
  if (name.empty()) return invalid_argument("header has a tensor with an empty name");
  if (!entry.is_object()) {
    return invalid_argument(where + ": entry must be an object, got " + describe(entry));
  }
  for (const auto& item : entry.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      return invalid_argument(where + ": unknown key " + in_quotes(item.key()));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) return invalid_argument(where + ": missing " + in_quotes(field));
  }

  SafetensorsTensor t;
  t.name = name;
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    return invalid_argument(where + ": dtype must be a string, got " + describe(dtype));
  }
  t.dtype = dtype.get<std::string>();

  const Json& shape = entry["shape"];
  if (!shape.is_array()) {
    return invalid_argument(where + ": shape must be an array, got " + describe(shape));
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    SLUICE_ASSIGN_OR_RETURN(std::uint64_t dim,
                            as_u64(shape[i], where + ": shape[" + std::to_string(i) + "]"));
    t.shape.push_back(dim);
  }

  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    return invalid_argument(where + ": data_offsets must be [begin, end], got " +
                            describe(offsets));
  }
  SLUICE_ASSIGN_OR_RETURN(t.begin, as_u64(offsets[0], where + ": data_offsets begin"));
  SLUICE_ASSIGN_OR_RETURN(t.end, as_u64(offsets[1], where + ": data_offsets end"));
  if (t.begin > t.end) {
    return invalid_argument(where + ": data_offsets begin " + std::to_string(t.begin) +
                            " is after end " + std::to_string(t.end));
  }
  SLUICE_ASSIGN_OR_RETURN(std::uint64_t need, tensor_bytes(where, t.dtype, t.shape));
  if (t.end > data_bytes) {
    return data_loss(where + ": data_offsets end " + std::to_string(t.end) +
                     " is past the end of the data buffer (" + std::to_string(data_bytes) +
                     " bytes); the file is truncated or the header is wrong");
  }
  if (t.end - t.begin != need) {
    return invalid_argument(where + ": data_offsets span " + std::to_string(t.end - t.begin) +
                            " bytes but dtype " + t.dtype + " and shape " + shape_string(t.shape) +
                            " need " + std::to_string(need));
  }
  return t;
}

Result<std::map<std::string, std::string>> parse_metadata(const Json& j) {
  if (!j.is_object()) {
    return invalid_argument("__metadata__ must be an object of strings, got " + describe(j));
  }
  std::map<std::string, std::string> out;
  for (const auto& item : j.items()) {
    if (!item.value().is_string()) {
      return invalid_argument("__metadata__ key " + in_quotes(item.key()) +
                              " must map to a string, got " + describe(item.value()));
    }
    out.emplace(item.key(), item.value().get<std::string>());
  }
  return out;
}

// The spec requires the data buffer to be fully indexed: the sorted ranges must tile it exactly.
Status check_tiling(const std::vector<SafetensorsTensor>& tensors, std::uint64_t data_bytes) {
  std::uint64_t cursor = 0;
  const SafetensorsTensor* previous = nullptr;
  auto range = [](const SafetensorsTensor& t) {
    return in_quotes(t.name) + " [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
  };
  for (const SafetensorsTensor& t : tensors) {
    if (t.begin < cursor) {
      return invalid_argument("tensors " + range(*previous) + " and " + range(t) + " overlap");
    }
    if (t.begin > cursor) {
      return invalid_argument("data buffer bytes [" + std::to_string(cursor) + ", " +
                              std::to_string(t.begin) + ") before tensor " + in_quotes(t.name) +
                              " are not covered by any tensor");
    }
    cursor = t.end;
    previous = &t;
  }
  if (cursor != data_bytes) {
    return invalid_argument("data buffer bytes [" + std::to_string(cursor) + ", " +
                            std::to_string(data_bytes) + ") at its end are not covered by any " +
                            "tensor");
  }
  return {};
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

std::string errno_text() {
  return std::generic_category().message(errno);
}

Status read_exact(std::FILE* f, std::uint8_t* dst, std::uint64_t n, const std::string& path) {
  std::size_t got = std::fread(dst, 1, n, f);
  if (got == n) return {};
  if (std::ferror(f)) {
    return internal_error("reading " + in_quotes(path) + " failed: " + errno_text());
  }
  return data_loss(in_quotes(path) + " ended after " + std::to_string(got) + " of " +
                   std::to_string(n) + " bytes; it changed while being read");
}

}  // namespace

std::size_t dtype_size(std::string_view dtype) {
  static const std::map<std::string_view, std::size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

Result<SafetensorsHeader> parse_safetensors_header(const std::uint8_t* prefix,
                                                   std::size_t prefix_len,
                                                   std::uint64_t file_size) {
  if (file_size < 8) {
    return data_loss("file is " + std::to_string(file_size) +
                     " bytes, shorter than the 8-byte header length");
  }
  if (prefix_len < 8) {
    return invalid_argument("prefix holds " + std::to_string(prefix_len) +
                            " bytes, fewer than the 8-byte header length");
  }
  SafetensorsHeader h;
  ByteReader in(prefix, prefix_len);
  h.header_bytes = in.u64();
  if (h.header_bytes > kSafetensorsMaxHeaderBytes) {
    return invalid_argument("header length " + std::to_string(h.header_bytes) +
                            " is larger than the limit of " +
                            std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
  }
  if (h.header_bytes > file_size - 8) {
    return data_loss("header length " + std::to_string(h.header_bytes) +
                     " points past the end of the file (" + std::to_string(file_size) + " bytes)");
  }
  h.data_offset = 8 + h.header_bytes;
  h.data_bytes = file_size - h.data_offset;
  if (prefix_len < h.data_offset) {
    return invalid_argument("prefix holds " + std::to_string(prefix_len) + " bytes but the " +
                            "header ends at byte " + std::to_string(h.data_offset));
  }
  // The spec requires '{' first; it also stops nlohmann from skipping a byte-order mark.
  const std::uint8_t* text = in.data(h.header_bytes);
  if (h.header_bytes == 0 || text[0] != '{') {
    return invalid_argument("header must be a JSON object starting with '{'");
  }
  SLUICE_ASSIGN_OR_RETURN(Json j, parse_without_duplicates(text, text + h.header_bytes));
  if (!j.is_object()) return invalid_argument("header must be a JSON object, got " + describe(j));

  for (const auto& item : j.items()) {
    if (item.key() == kMetadataKey) {
      SLUICE_ASSIGN_OR_RETURN(h.metadata, parse_metadata(item.value()));
      continue;
    }
    SLUICE_ASSIGN_OR_RETURN(SafetensorsTensor t,
                            parse_entry(item.key(), item.value(), h.data_bytes));
    h.tensors.push_back(std::move(t));
  }
  // Zero-size tensors sort before a tensor starting at the same offset; names break full ties so
  // the order does not depend on the JSON's key order.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  SLUICE_TRY(check_tiling(h.tensors, h.data_bytes));
  return h;
}

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  std::error_code ec;
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return not_found("cannot open safetensors file " + in_quotes(path) + ": " + ec.message());
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) return not_found("cannot open safetensors file " + in_quotes(path) + ": " + errno_text());

  // Read the length, then the header only when the length is sane; otherwise hand the parser the
  // 8 bytes so it reports what is wrong with them.
  std::vector<std::uint8_t> prefix(std::min<std::uint64_t>(file_size, 8));
  SLUICE_TRY(read_exact(f.get(), prefix.data(), prefix.size(), path));
  if (prefix.size() == 8) {
    const std::uint64_t n = ByteReader(prefix.data(), prefix.size()).u64();
    if (n <= kSafetensorsMaxHeaderBytes && n <= file_size - 8) {
      prefix.resize(8 + n);
      SLUICE_TRY(read_exact(f.get(), prefix.data() + 8, n, path));
    }
  }
  auto header = parse_safetensors_header(prefix.data(), prefix.size(), file_size);
  if (!header.is_ok()) return header.status().with_context(in_quotes(path));

  SafetensorsFile out;
  out.header = std::move(header).value();
  out.data.resize(out.header.data_bytes);
  SLUICE_TRY(read_exact(f.get(), out.data.data(), out.data.size(), path));
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<SafetensorsInput>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the caller's order in the header, which makes files easy to read by eye.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsInput& t = tensors[i];
    const std::string where = "tensor " + in_quotes(t.name);
    if (t.name.empty()) {
      return invalid_argument("tensor #" + std::to_string(i) + " has an empty name");
    }
    if (t.name == kMetadataKey) return invalid_argument(where + ": the name is reserved");
    if (!names.insert(t.name).second) return invalid_argument("duplicate " + where);
    SLUICE_ASSIGN_OR_RETURN(std::uint64_t need, tensor_bytes(where, t.dtype, t.shape));
    if (t.bytes != need) {
      return invalid_argument(where + ": " + std::to_string(t.bytes) + " bytes given but dtype " +
                              t.dtype + " and shape " + shape_string(t.shape) + " need " +
                              std::to_string(need));
    }
    if (t.data == nullptr && t.bytes > 0) return invalid_argument(where + ": data is null");
    std::uint64_t end = 0;
    if (__builtin_add_overflow(offset, t.bytes, &end)) {
      return invalid_argument(where + ": total size overflows 64 bits");
    }
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", nlohmann::ordered_json::array({offset, end})}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    return invalid_argument(std::string("a tensor name or metadata string is not valid UTF-8: ") +
                            e.what());
  }
  // Pads so the data buffer starts 8-byte aligned (8 + N with N a multiple of 8), as the
  // reference writer does; readers that map the file can then view F64/I64 tensors in place.
  text.append((8 - text.size() % 8) % 8, ' ');

  // Written beside the target and renamed over it, so a reader never sees a half-written file.
  const std::string partial = path + ".partial";
  FilePtr f(std::fopen(partial.c_str(), "wb"));
  if (!f) return not_found("cannot create " + in_quotes(partial) + ": " + errno_text());
  std::uint8_t length[8];
  ByteWriter(length, sizeof length).u64(text.size());
  bool ok = std::fwrite(length, 1, 8, f.get()) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
  for (std::size_t i = 0; ok && i < tensors.size(); ++i) {
    // Zero-size tensors may have null data, which fwrite must not be handed.
    if (tensors[i].bytes == 0) continue;
    ok = std::fwrite(tensors[i].data, 1, tensors[i].bytes, f.get()) == tensors[i].bytes;
  }
  // fclose flushes, so its result is part of whether the write succeeded.
  ok = ok && std::fclose(f.release()) == 0;
  const std::string error = errno_text();
  f.reset();
  std::error_code ec;
  if (ok) std::filesystem::rename(partial, path, ec);
  if (!ok || ec) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    return internal_error("writing " + in_quotes(path) + " failed: " + (ec ? ec.message() : error));
  }
  return {};
}

}  // namespace sluice::core
