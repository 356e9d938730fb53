#include "actor/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/bytes.hpp"
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
  std::string out;
  core::ByteWriter w(out);
  w.put(kMagic, sizeof(kMagic)).u32(kFormatVersion).u64(body.size()).put(body);
  w.u64(core::chunk_checksum(out.data(), out.size()));
  return write_file_atomic((fs::path(dir) / kCheckpointFile).string(), out)
      .with_context("actor checkpoint");
}

core::Result<CheckpointState> read_checkpoint(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(std::string in, read_file(path, kMaxCheckpointBytes));
  auto damaged = [&](const std::string& what) {
    return core::data_loss("actor checkpoint '" + path + "' is damaged: " + what);
  };
  if (in.size() < kHeaderBytes + sizeof(std::uint64_t)) return damaged("too short");
  // The checksum trails what it covers; the header and body are read from the front.
  const std::size_t end = in.size() - sizeof(std::uint64_t);
  core::ByteReader r(in.data(), end);
  if (r.view(sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) {
    return damaged("not a checkpoint");
  }
  const std::uint64_t checksum = core::ByteReader(in.data() + end, sizeof(std::uint64_t)).u64();
  if (core::chunk_checksum(in.data(), end) != checksum) {
    return damaged("checksum mismatch");
  }
  const std::uint32_t version = r.u32();
  if (version < kOldestFormat || version > kFormatVersion) {
    return core::invalid_argument(
        "actor checkpoint '" + path + "' has format version " + std::to_string(version) +
        ", expected " + std::to_string(kOldestFormat) + " to " + std::to_string(kFormatVersion));
  }
  const std::uint64_t body_len = r.u64();
  if (body_len != r.left()) return damaged("body length does not match the file");
  const std::string_view body = r.view(body_len);
  auto doc = core::config::Json::parse(body.begin(), body.end(), nullptr,
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
