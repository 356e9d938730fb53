// The safetensors reader and writer: round trips byte for byte, files checked against the spec by
// hand, and every malformed header the reader must refuse, crafted byte by byte.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "format/safetensors.hpp"

using namespace sluice::core;
namespace fs = std::filesystem;

namespace {

// A directory of its own under the system temp dir, removed with everything in it.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("sluice-safetensors-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// A file image: the length field `length` (the header's size unless given), `header`, then
// `data_bytes` bytes of data.
std::vector<std::uint8_t> image(const std::string& header, std::size_t data_bytes,
                                std::uint64_t length = ~0ULL) {
  if (length == ~0ULL) length = header.size();
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::uint8_t>(length >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i)
    out.push_back(static_cast<std::uint8_t>(i));
  return out;
}

Result<SafetensorsHeader> parse(const std::string& header, std::size_t data_bytes) {
  auto bytes = image(header, data_bytes);
  return parse_safetensors_header(bytes.data(), bytes.size(), bytes.size());
}

// The parse fails with `code` and a message that contains `needle`.
void expect_error(const Result<SafetensorsHeader>& r, Code code, const std::string& needle) {
  REQUIRE_FALSE(r.is_ok());
  INFO(r.status().to_string());
  CHECK(r.status().code() == code);
  CHECK(r.status().message().find(needle) != std::string::npos);
}

void expect_invalid(const std::string& header, std::size_t data_bytes, const std::string& needle) {
  INFO("header: " << header);
  expect_error(parse(header, data_bytes), Code::kInvalidArgument, needle);
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>(seed + 7 * i);
  return v;
}

}  // namespace

TEST_SUITE("core.safetensors") {
  TEST_CASE("dtype sizes") {
    CHECK(dtype_size("BOOL") == 1);
    CHECK(dtype_size("U8") == 1);
    CHECK(dtype_size("F8_E4M3") == 1);
    CHECK(dtype_size("BF16") == 2);
    CHECK(dtype_size("F16") == 2);
    CHECK(dtype_size("I32") == 4);
    CHECK(dtype_size("F32") == 4);
    CHECK(dtype_size("I64") == 8);
    CHECK(dtype_size("F64") == 8);
    CHECK(dtype_size("f32") == 0);
    CHECK(dtype_size("F4") == 0);
    CHECK(dtype_size("") == 0);
  }

  TEST_CASE("write then read back byte for byte") {
    TempDir dir;
    const auto w = pattern(2 * 3 * 4, 1);
    const auto h = pattern(5 * 2 * 2, 50);
    const auto step = pattern(8, 99);
    const auto flags = std::vector<std::uint8_t>{1, 0, 1};
    const auto d = pattern(2 * 8, 200);
    std::vector<SafetensorsInput> in = {
        {"layer.0.weight", "F32", {2, 3}, w.data(), w.size()},
        {"emb", "BF16", {5, 2}, h.data(), h.size()},
        {"step", "I64", {}, step.data(), step.size()},
        {"empty", "U8", {0, 5}, nullptr, 0},
        {"mask", "BOOL", {3}, flags.data(), flags.size()},
        {"scale", "F64", {2, 1}, d.data(), d.size()},
    };
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
    const std::string path = dir.file("model.safetensors");
    Status written = write_safetensors(path, in, meta);
    REQUIRE_MESSAGE(written.is_ok(), written.to_string());
    CHECK_FALSE(fs::exists(path + ".partial"));

    auto r = read_safetensors(path);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    CHECK(r->header.metadata == meta);
    REQUIRE(r->header.tensors.size() == in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      const SafetensorsTensor& t = r->header.tensors[i];
      INFO("tensor " << in[i].name);
      // Contiguous in the given order, so sorting by offset gives the input order back (the
      // zero-size tensor sits where it was written, between "step" and "mask").
      CHECK(t.name == in[i].name);
      CHECK(t.dtype == in[i].dtype);
      CHECK(t.shape == in[i].shape);
      REQUIRE(t.end - t.begin == in[i].bytes);
      std::vector<std::uint8_t> got(r->data.begin() + static_cast<std::ptrdiff_t>(t.begin),
                                    r->data.begin() + static_cast<std::ptrdiff_t>(t.end));
      std::vector<std::uint8_t> want(in[i].data, in[i].data + in[i].bytes);
      CHECK(got == want);
    }
  }

  TEST_CASE("the written file follows the spec") {
    TempDir dir;
    const auto a = pattern(3 * 4, 3);
    const auto b = pattern(2, 9);
    // Names of every length mod 8, so some headers need padding and some do not.
    std::size_t padded = 0;
    for (std::size_t len = 1; len <= 8; ++len) {
      const std::string name(len, 'b');
      INFO("second tensor name length " << len);
      const std::string path = dir.file("spec" + std::to_string(len) + ".safetensors");
      REQUIRE(write_safetensors(
                  path,
                  {{"a", "I32", {3}, a.data(), a.size()}, {name, "I8", {1, 2}, b.data(), b.size()}},
                  {{"k", "v"}})
                  .is_ok());
      const auto bytes = read_bytes(path);
      REQUIRE(bytes.size() >= 8);
      std::uint64_t n = 0;
      for (int i = 7; i >= 0; --i)
        n = (n << 8) | bytes[static_cast<std::size_t>(i)];
      CHECK(n % 8 == 0);
      REQUIRE(bytes.size() == 8 + n + a.size() + b.size());
      const std::string header(bytes.begin() + 8,
                               bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
      CHECK(header.front() == '{');
      const auto close = header.find_last_of('}');
      REQUIRE(close != std::string::npos);
      CHECK(header.size() - (close + 1) < 8);  // at most 7 bytes of padding
      CHECK(header.substr(close + 1).find_first_not_of(' ') == std::string::npos);
      if (close + 1 < header.size()) ++padded;
      const auto j = nlohmann::json::parse(header);
      CHECK(j.size() == 3);
      CHECK(j["__metadata__"] == nlohmann::json{{"k", "v"}});
      CHECK(j["a"] ==
            nlohmann::json::parse(R"({"dtype":"I32","shape":[3],"data_offsets":[0,12]})"));
      CHECK(j[name] ==
            nlohmann::json::parse(R"({"dtype":"I8","shape":[1,2],"data_offsets":[12,14]})"));
      CHECK(std::equal(a.begin(), a.end(), bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n)));
      CHECK(std::equal(b.begin(), b.end(), bytes.end() - 2));
    }
    CHECK(padded == 7);
  }

  TEST_CASE("the writer refuses bad input and leaves no file") {
    TempDir dir;
    const std::string path = dir.file("bad.safetensors");
    const auto four = pattern(4, 0);
    auto fails = [&](std::vector<SafetensorsInput> in, const std::string& needle) {
      Status s = write_safetensors(path, in);
      INFO(s.to_string());
      CHECK(s.code() == Code::kInvalidArgument);
      CHECK(s.message().find(needle) != std::string::npos);
      CHECK_FALSE(fs::exists(path));
      CHECK_FALSE(fs::exists(path + ".partial"));
    };
    fails({{"x", "F31", {1}, four.data(), 4}}, "tensor 'x': unknown dtype 'F31'");
    fails({{"x", "F32", {2}, four.data(), 4}}, "4 bytes given but dtype F32 and shape [2] need 8");
    fails({{"x", "U8", {4}, four.data(), 4}, {"x", "U8", {4}, four.data(), 4}},
          "duplicate tensor 'x'");
    fails({{"", "U8", {4}, four.data(), 4}}, "tensor #0 has an empty name");
    fails({{"__metadata__", "U8", {4}, four.data(), 4}}, "the name is reserved");
    fails({{"x", "U8", {4}, nullptr, 4}}, "data is null");
    fails({{"x", "U8", {1ULL << 40, 1ULL << 40}, four.data(), 4}}, "overflows");
    fails({{"bad\xff", "U8", {4}, four.data(), 4}}, "not valid UTF-8");
  }

  TEST_CASE("valid headers parse") {
    auto r = parse(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
                   R"("z":{"dtype":"F16","shape":[0,7],"data_offsets":[4,4]},)"
                   R"("a":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                   R"("__metadata__":{"x":"y"}}     )",
                   6);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    REQUIRE(r->tensors.size() == 3);
    CHECK(r->tensors[0].name == "a");
    CHECK(r->tensors[1].name == "z");  // zero-size, sorted before "b" at the same offset
    CHECK(r->tensors[2].name == "b");
    CHECK(r->tensors[1].shape == std::vector<std::uint64_t>{0, 7});
    CHECK(r->metadata.at("x") == "y");
    CHECK(r->header_bytes + 8 == r->data_offset);
    CHECK(r->data_bytes == 6);

    auto empty = parse("{}", 0);
    REQUIRE(empty.is_ok());
    CHECK(empty->tensors.empty());
    // A zero dim makes the tensor empty even when the other dims multiply past 64 bits.
    CHECK(
        parse(R"({"e":{"dtype":"F64","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", 0)
            .is_ok());
  }

  TEST_CASE("short files and bad header lengths") {
    std::vector<std::uint8_t> five = {1, 2, 3, 4, 5};
    expect_error(parse_safetensors_header(five.data(), five.size(), five.size()), Code::kDataLoss,
                 "shorter than the 8-byte header length");
    auto past = image("{}", 0, 100);
    expect_error(parse_safetensors_header(past.data(), past.size(), past.size()), Code::kDataLoss,
                 "header length 100 points past the end of the file");
    auto huge = image("{}", 0, 1ULL << 62);
    expect_error(parse_safetensors_header(huge.data(), huge.size(), huge.size()),
                 Code::kInvalidArgument, "is larger than the limit");
    auto full = image("{}", 4);
    expect_error(parse_safetensors_header(full.data(), 9, full.size()), Code::kInvalidArgument,
                 "prefix holds 9 bytes");
  }

  TEST_CASE("headers that are not a JSON object") {
    expect_invalid("{\"a\":", 0, "not valid UTF-8 JSON");
    expect_invalid("[1, 2]", 0, "starting with '{'");
    expect_invalid("", 0, "starting with '{'");
    expect_invalid("\xEF\xBB\xBF{}", 0, "starting with '{'");
    expect_invalid("{} x", 0, "not valid UTF-8 JSON");
    expect_invalid("{\"a\xff\":{}}", 0, "not valid UTF-8 JSON");
    expect_invalid(R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", 0, "empty name");
  }

  TEST_CASE("tensor entries with missing, wrong or extra fields") {
    expect_invalid(R"({"w":[1]})", 0, "tensor 'w': entry must be an object");
    expect_invalid(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", 1, "tensor 'w': missing 'dtype'");
    expect_invalid(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", 1,
                   "tensor 'w': missing 'shape'");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1]}})", 1, "tensor 'w': missing 'data_offsets'");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})", 1,
                   "tensor 'w': unknown key 'extra'");
    expect_invalid(R"({"w":{"dtype":8,"shape":[1],"data_offsets":[0,1]}})", 1,
                   "tensor 'w': dtype must be a string");
    expect_invalid(R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,1]}})", 1,
                   "tensor 'w': unknown dtype 'F12'");
    expect_invalid(R"({"w":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", 1,
                   "tensor 'w': shape must be an array");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1,-2],"data_offsets":[0,1]}})", 1,
                   "tensor 'w': shape[1] must be a non-negative integer, got an integer -2");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1,
                   "tensor 'w': shape[0] must be a non-negative integer");
    expect_invalid(R"({"w":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}})", 1,
                   "tensor 'w': shape[0] must be a non-negative integer, got a string");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1,
                   "tensor 'w': data_offsets must be [begin, end]");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":{"b":0}}})", 1,
                   "tensor 'w': data_offsets must be [begin, end]");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,1]}})", 1,
                   "tensor 'w': data_offsets begin must be a non-negative integer");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1e0]}})", 1,
                   "tensor 'w': data_offsets end must be a non-negative integer");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})", 1,
                   "tensor 'w': data_offsets begin 1 is after end 0");
  }

  TEST_CASE("offsets checked against the data buffer") {
    const std::string u8x4 = R"("dtype":"U8","shape":[4])";
    expect_error(parse(R"({"w":{)" + u8x4 + R"(,"data_offsets":[0,4]}})", 3), Code::kDataLoss,
                 "tensor 'w': data_offsets end 4 is past the end of the data buffer (3 bytes)");
    expect_invalid(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", 8,
                   "tensor 'w': data_offsets span 8 bytes but dtype F32 and shape [2, 2] need 16");
    expect_invalid(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                   8, "tensor 'w': shape [4294967296, 4294967296] of U8 overflows");
    expect_invalid(R"({"w":{"dtype":"F64","shape":[4294967296,536870912],"data_offsets":[0,8]}})",
                   8, "tensor 'w': shape [4294967296, 536870912] of F64 overflows");
    expect_invalid(R"({"a":{)" + u8x4 + R"(,"data_offsets":[0,4]},"b":{)" + u8x4 +
                       R"(,"data_offsets":[2,6]}})",
                   6, "tensors 'a' [0, 4) and 'b' [2, 6) overlap");
    expect_invalid(R"({"a":{)" + u8x4 + R"(,"data_offsets":[0,4]},"b":{)" + u8x4 +
                       R"(,"data_offsets":[5,9]}})",
                   9, "data buffer bytes [4, 5) before tensor 'b' are not covered");
    expect_invalid(R"({"a":{)" + u8x4 + R"(,"data_offsets":[2,6]}})", 6,
                   "data buffer bytes [0, 2) before tensor 'a' are not covered");
    expect_invalid(R"({"a":{)" + u8x4 + R"(,"data_offsets":[0,4]}})", 7,
                   "data buffer bytes [4, 7) at its end are not covered");
    expect_invalid("{}", 1, "data buffer bytes [0, 1) at its end are not covered");
  }

  TEST_CASE("metadata must map strings to strings") {
    expect_invalid(R"({"__metadata__":["a"]})", 0, "__metadata__ must be an object of strings");
    expect_invalid(R"({"__metadata__":{"step":12}})", 0,
                   "__metadata__ key 'step' must map to a string, got an integer 12");
  }

  TEST_CASE("duplicate keys are rejected, not silently dropped") {
    const std::string e = R"({"dtype":"U8","shape":[2],"data_offsets":[0,2]})";
    expect_invalid(R"({"w":)" + e + R"(,"w":)" + e + "}", 2, "duplicate tensor name 'w'");
    expect_invalid(R"({"w":{"dtype":"F32","dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2,
                   "duplicate key 'dtype' in 'w'");
    expect_invalid(R"({"__metadata__":{"a":"1","a":"2"}})", 0,
                   "duplicate key 'a' in '__metadata__'");
    expect_invalid(R"({"__metadata__":{},"__metadata__":{}})", 0, "duplicate key '__metadata__'");
    // The same name spelled with an escape is still the same name.
    expect_invalid(R"({"w":)" + e + R"(,"\u0077":)" + e + "}", 2, "duplicate tensor name 'w'");
  }

  TEST_CASE("read_safetensors rejects truncated files and missing ones") {
    TempDir dir;
    const auto a = pattern(16, 5);
    const std::string path = dir.file("t.safetensors");
    REQUIRE(write_safetensors(path, {{"a", "F32", {4}, a.data(), a.size()}}).is_ok());
    REQUIRE(read_safetensors(path).is_ok());

    fs::resize_file(path, fs::file_size(path) - 1);
    auto cut = read_safetensors(path);
    REQUIRE_FALSE(cut.is_ok());
    CHECK(cut.status().code() == Code::kDataLoss);
    CHECK(cut.status().message().find("t.safetensors") != std::string::npos);
    CHECK(cut.status().message().find("data_offsets end 16 is past the end") != std::string::npos);

    write_bytes(path, image("{}", 0, 64));
    auto past = read_safetensors(path);
    REQUIRE_FALSE(past.is_ok());
    CHECK(past.status().message().find("points past the end of the file") != std::string::npos);

    write_bytes(path, {1, 2, 3});
    auto tiny = read_safetensors(path);
    REQUIRE_FALSE(tiny.is_ok());
    CHECK(tiny.status().message().find("file is 3 bytes") != std::string::npos);

    auto missing = read_safetensors(dir.file("nope.safetensors"));
    REQUIRE_FALSE(missing.is_ok());
    CHECK(missing.status().code() == Code::kNotFound);
  }
}
