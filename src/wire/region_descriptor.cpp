#include "wire/region_descriptor.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

#include "core/bytes.hpp"
#include "wire/chunk_format.hpp"

namespace sluice::core {

namespace {

constexpr std::string_view kDescMagic = "SLRD";
constexpr std::uint64_t kMaxHostId = 256;
constexpr std::uint64_t kMaxStreamAddresses = 8;
constexpr std::uint64_t kMaxStreamAddress = 64;
constexpr std::uint64_t kMaxDatacenter = 255;
constexpr std::uint8_t kFlagVerified = 1;

// Reads the descriptor's fields in order, naming the first that does not fit: every read checks
// what is left first, and after a failure reads nothing more.
struct DescReader {
  ByteReader r;
  std::optional<Status> error;

  std::uint64_t number(int bytes, const char* what) {
    if (error) return 0;
    if (r.left() < static_cast<std::size_t>(bytes)) {
      error = protocol_error(std::string("region descriptor truncated before its ") + what);
      return 0;
    }
    return r.u(bytes);
  }
  std::string text(std::uint64_t n, std::uint64_t max, const char* what) {
    if (error) return {};
    if (n > max || n > r.left()) {
      error = protocol_error(std::string("region descriptor: ") + what + " of " +
                             std::to_string(n) + " bytes does not fit (at most " +
                             std::to_string(std::min<std::uint64_t>(max, r.left())) + ")");
      return {};
    }
    return std::string(r.view(n));
  }
};

}  // namespace

std::string RegionDescriptor::encode() const {
  std::string out;
  ByteWriter w(out);
  w.put(kDescMagic).u16(kRegionDescriptorVersion).u16(0).u64(base).u64(length);
  w.u32(static_cast<std::uint32_t>(worker_address.size())).put(worker_address);
  w.u32(static_cast<std::uint32_t>(rkey.size())).put(rkey);
  w.u16(static_cast<std::uint16_t>(host.size())).put(host);
  w.u8(static_cast<std::uint8_t>(stream.size()));
  for (const auto& a : stream)
    w.u16(static_cast<std::uint16_t>(a.size())).put(a);
  w.u8(static_cast<std::uint8_t>(stream_token.size())).put(stream_token);
  w.u8(static_cast<std::uint8_t>(stream_crypto));
  w.u8(static_cast<std::uint8_t>(datacenter.size())).put(datacenter);
  w.u32(uid).u8(verified ? kFlagVerified : 0);
  return out;
}

Result<RegionDescriptor> RegionDescriptor::decode(const std::string& in) {
  constexpr std::size_t kFixed = 4 + 2 + 2 + 8 + 8 + 4;
  if (in.size() < kFixed) {
    return protocol_error("region descriptor truncated: " + std::to_string(in.size()) +
                          " bytes, need at least " + std::to_string(kFixed + 4));
  }
  DescReader r{ByteReader(in), std::nullopt};
  if (r.r.view(kDescMagic.size()) != kDescMagic) {
    return protocol_error("not a region descriptor (wrong magic)");
  }
  const std::uint16_t version = r.r.u16();
  if (version != kRegionDescriptorVersion) {
    return protocol_error("region descriptor version " + std::to_string(version) +
                          " is not supported (this build reads " +
                          std::to_string(kRegionDescriptorVersion) + ")");
  }
  r.r.skip(2);  // reserved; written as 0, not checked
  RegionDescriptor d;
  d.base = r.number(8, "base");
  d.length = r.number(8, "length");
  d.worker_address = r.text(r.number(4, "worker address"), in.size(), "worker address");
  d.rkey = r.text(r.number(4, "rkey"), in.size(), "rkey");
  d.host = r.text(r.number(2, "host"), kMaxHostId, "host");
  auto n = r.number(1, "stream addresses");
  if (!r.error && n > kMaxStreamAddresses)
    return protocol_error("region descriptor: " + std::to_string(n) +
                          " stream addresses (at most " + std::to_string(kMaxStreamAddresses) +
                          ")");
  for (std::uint64_t i = 0; i < n && !r.error; ++i)
    d.stream.push_back(r.text(r.number(2, "stream address"), kMaxStreamAddress, "stream address"));
  d.stream_token = r.text(r.number(1, "stream token"), kStreamTokenBytes, "stream token");
  const auto crypto = r.number(1, "stream encryption");
  d.datacenter = r.text(r.number(1, "datacenter"), kMaxDatacenter, "datacenter");
  d.uid = static_cast<std::uint32_t>(r.number(4, "holder uid"));
  const auto flags = r.number(1, "flags");
  if (r.error) return *r.error;
  if ((flags & ~std::uint64_t{kFlagVerified}) != 0)
    return protocol_error("region descriptor: unknown flags " + std::to_string(flags) +
                          " (this build knows only 1, verified)");
  d.verified = (flags & kFlagVerified) != 0;
  if (crypto > static_cast<std::uint8_t>(StreamCrypto::kEncrypted))
    return protocol_error("region descriptor: unknown stream encryption " + std::to_string(crypto));
  d.stream_crypto = static_cast<StreamCrypto>(crypto);
  if (d.worker_address.empty()) return protocol_error("region descriptor: empty worker address");
  if (d.rkey.empty()) return protocol_error("region descriptor: empty rkey");
  if (d.stream.empty() != d.stream_token.empty() ||
      (!d.stream_token.empty() && d.stream_token.size() != kStreamTokenBytes)) {
    return protocol_error("region descriptor: a chunk stream needs addresses and a " +
                          std::to_string(kStreamTokenBytes) + "-byte token");
  }
  if (!r.r.at_end()) {
    return protocol_error("region descriptor: " + std::to_string(r.r.left()) +
                          " bytes after its last field");
  }
  return d;
}

}  // namespace sluice::core
