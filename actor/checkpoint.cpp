#include "actor/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/checksum.hpp"
#include "core/config.hpp"

namespace sluice::actor {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'A', 'C'};
constexpr std::uint32_t kFormatVersion = 2;
constexpr std::uint32_t kOldestFormat = 1;  // lists every consumed id (still read)
// Far above any real checkpoint (the consumed ids are a bounded set, the summary's lists stop at
// a million ids, about 20 MB): a size beyond it is damage.
constexpr std::uint64_t kMaxCheckpointBytes = 1ull << 30;
constexpr std::size_t kHeaderBytes = sizeof(kMagic) + sizeof(std::uint32_t) + sizeof(std::uint64_t);

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T get(const std::string& in, std::size_t at) {
  T v{};
  std::memcpy(&v, in.data() + at, sizeof(v));
  return v;
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

core::Status sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core::unavailable("cannot open '" + path + "' to sync: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) return core::unavailable("fsync of '" + path + "' failed: " + why);
  return {};
}

core::Status write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return core::unavailable("cannot write '" + tmp + "'");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) return core::unavailable("writing '" + tmp + "' failed");
  }
  SLUICE_TRY(sync_file(tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return core::unavailable("cannot rename '" + tmp + "' to '" + path + "': " + errno_text());
  }
  std::string dir = fs::path(path).parent_path().string();
  return sync_file(dir.empty() ? "." : dir);
}

core::Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return core::not_found("cannot read '" + path + "': " + ec.message());
  if (size > max_bytes) {
    return core::data_loss("'" + path + "' is " + std::to_string(size) + " bytes, more than " +
                           std::to_string(max_bytes));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return core::not_found("cannot open '" + path + "'");
  std::string bytes(size, '\0');
  f.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(f.gcount()) != size) {
    return core::data_loss("'" + path + "' changed size while read");
  }
  return bytes;
}

core::Status write_checkpoint(const std::string& dir, const CheckpointState& state) {
  const std::string body = core::config::to_json(state).dump();
  std::string out(kMagic, sizeof(kMagic));
  put(out, kFormatVersion);
  put(out, static_cast<std::uint64_t>(body.size()));
  out += body;
  put(out, core::chunk_checksum(out.data(), out.size()));
  return write_file_atomic((fs::path(dir) / kCheckpointFile).string(), out)
      .with_context("actor checkpoint");
}

core::Result<CheckpointState> read_checkpoint(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string in, read_file(path, kMaxCheckpointBytes));
  auto damaged = [&](const std::string& what) {
    return core::data_loss("actor checkpoint '" + path + "' is damaged: " + what);
  };
  if (in.size() < kHeaderBytes + sizeof(std::uint64_t)) return damaged("too short");
  if (std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) return damaged("not a checkpoint");
  const std::size_t end = in.size() - sizeof(std::uint64_t);
  if (core::chunk_checksum(in.data(), end) != get<std::uint64_t>(in, end)) {
    return damaged("checksum mismatch");
  }
  const auto version = get<std::uint32_t>(in, sizeof(kMagic));
  if (version < kOldestFormat || version > kFormatVersion) {
    return core::invalid_argument(
        "actor checkpoint '" + path + "' has format version " + std::to_string(version) +
        ", expected " + std::to_string(kOldestFormat) + " to " + std::to_string(kFormatVersion));
  }
  const auto body_len = get<std::uint64_t>(in, sizeof(kMagic) + sizeof(std::uint32_t));
  if (body_len != end - kHeaderBytes) return damaged("body length does not match the file");
  auto doc = core::config::Json::parse(in.begin() + kHeaderBytes, in.begin() + end, nullptr,
                                       /*allow_exceptions=*/false);
  if (doc.is_discarded()) return damaged("body is not JSON");
  CheckpointState s;
  if (core::Status st = core::config::parse(doc, s); !st.is_ok()) return damaged(st.message());
  if (version == 1) s.consumed_group_size = 0;  // its consumed_ids is the whole set
  if (s.policy_file.empty() || s.policy_file.find('/') != std::string::npos) {
    return damaged("bad policy file name '" + s.policy_file + "'");
  }
  return s;
}

}  // namespace sluice::actor
