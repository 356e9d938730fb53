#include "actor/batch_record_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/bytes.hpp"
#include "core/log.hpp"

namespace sluice::actor {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

struct Frame {
  FrameKind kind = FrameKind::kStart;
  std::string payload;
  std::uint64_t offset = 0;  // where the frame starts in the file
  std::uint64_t end = 0;     // where it ends
};

}  // namespace

// Frames off a stream, each checked against its checksum.
struct BatchRecordReader::Impl {
  std::string path;
  std::ifstream in;
  std::uint64_t offset = 0;

  core::Status damaged(std::uint64_t at, const std::string& what) const {
    return core::data_loss("batch record '" + path + "' is damaged at byte " + std::to_string(at) +
                           ": " + what);
  }

  core::Status read_header() {
    std::string head(kBatchRecordHeaderBytes, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    if (static_cast<std::size_t>(in.gcount()) != head.size()) {
      return damaged(0, "the file header ends early");
    }
    offset = head.size();
    return check_record_header(head).with_context("'" + path + "'");
  }

  // The next frame, or nullopt at the end of the file.
  core::Result<std::optional<Frame>> read_frame() {
    Frame f;
    f.offset = offset;
    std::string head(kFrameHeadBytes, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got == 0) return std::optional<Frame>();
    if (got != head.size()) return damaged(f.offset, "a frame torn in its head");
    core::ByteReader r(head);
    const std::uint32_t kind = r.u32();
    const std::uint64_t length = r.u64();
    if (kind != static_cast<std::uint32_t>(FrameKind::kStart) &&
        kind != static_cast<std::uint32_t>(FrameKind::kStep)) {
      return damaged(f.offset, "unknown frame kind " + std::to_string(kind));
    }
    if (length > kMaxFramePayload) {
      return damaged(f.offset, "a frame of " + std::to_string(length) + " bytes");
    }
    f.kind = static_cast<FrameKind>(kind);
    std::string rest(length + kFrameTailBytes, '\0');
    in.read(rest.data(), static_cast<std::streamsize>(rest.size()));
    if (static_cast<std::size_t>(in.gcount()) != rest.size()) {
      return damaged(f.offset, "the last frame is torn (the file ends inside it)");
    }
    const std::string_view payload(rest.data(), length);
    const std::uint64_t stored = core::ByteReader(rest.data() + length, kFrameTailBytes).u64();
    if (frame_checksum(head, payload) != stored) return damaged(f.offset, "checksum mismatch");
    f.payload.assign(payload);
    offset += head.size() + rest.size();
    f.end = offset;
    return std::optional<Frame>(std::move(f));
  }
};

core::Result<std::unique_ptr<BatchRecordReader>> BatchRecordReader::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->in.open(path, std::ios::binary);
  if (!impl->in) return core::not_found("batch record '" + path + "': cannot open it");
  SLUICE_TRY(impl->read_header());
  SLUICE_ASSIGN_OR_RETURN(std::optional<Frame> first, impl->read_frame());
  if (!first || first->kind != FrameKind::kStart) {
    return impl->damaged(kBatchRecordHeaderBytes, "it does not begin with a start frame");
  }
  auto start = decode_start(first->payload);
  if (!start.is_ok()) return impl->damaged(first->offset, start.status().message());
  return std::unique_ptr<BatchRecordReader>(
      new BatchRecordReader(std::move(impl), std::move(*start)));
}

BatchRecordReader::BatchRecordReader(std::unique_ptr<Impl> impl, RecordStart start)
    : impl_(std::move(impl)), start_(std::move(start)) {}
BatchRecordReader::~BatchRecordReader() = default;

std::uint64_t BatchRecordReader::offset() const {
  return impl_->offset;
}

core::Result<std::optional<RecordedStep>> BatchRecordReader::next() {
  SLUICE_ASSIGN_OR_RETURN(std::optional<Frame> f, impl_->read_frame());
  if (!f) return std::optional<RecordedStep>();
  if (f->kind != FrameKind::kStep) return impl_->damaged(f->offset, "a second start frame");
  auto step = decode_step(f->payload);
  if (!step.is_ok()) return impl_->damaged(f->offset, step.status().message());
  if (step->step != last_step_ + 1) {
    return impl_->damaged(f->offset, "step " + std::to_string(step->step) + " after step " +
                                         std::to_string(last_step_));
  }
  last_step_ = step->step;
  return std::optional<RecordedStep>(std::move(*step));
}

// ---- the writer ----

BatchRecordWriter::BatchRecordWriter(std::string path, int fd, std::uint64_t bytes,
                                     std::uint64_t last_step)
    : path_(std::move(path)), fd_(fd), bytes_(bytes), last_step_(last_step) {}

BatchRecordWriter::~BatchRecordWriter() {
  if (fd_ >= 0 && ::close(fd_) != 0) {
    core::log::warn("batch record '{}': close failed: {}", path_, errno_text());
  }
}

core::Status BatchRecordWriter::write_all(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return core::unavailable("batch record '" + path_ + "': write failed: " + errno_text());
    done += static_cast<std::size_t>(n);
  }
  bytes_ += bytes.size();
  return {};
}

core::Result<std::unique_ptr<BatchRecordWriter>> BatchRecordWriter::create(
    const std::string& path, const RecordStart& start) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return core::unavailable("batch record '" + path + "': cannot create it: " + errno_text());
  std::unique_ptr<BatchRecordWriter> w(new BatchRecordWriter(path, fd, 0, 0));
  SLUICE_TRY(w->write_all(encode_record_header()));
  SLUICE_TRY(w->write_all(encode_frame(FrameKind::kStart, encode_start(start))));
  SLUICE_TRY(w->sync());
  return w;
}

core::Result<std::unique_ptr<BatchRecordWriter>> BatchRecordWriter::resume(const std::string& path,
                                                                           std::uint64_t step) {
  // Read frame by frame up to `step`; what follows (steps of a killed incarnation after its last
  // checkpoint, a torn frame) is cut off unread.
  BatchRecordReader::Impl scan;
  scan.path = path;
  scan.in.open(path, std::ios::binary);
  if (!scan.in) return core::not_found("batch record '" + path + "': cannot open it");
  SLUICE_TRY(scan.read_header());
  std::uint64_t keep = 0, last = 0;
  bool started = false;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(std::optional<Frame> f, scan.read_frame());
    if (!f) break;
    if (!started) {
      if (f->kind != FrameKind::kStart) {
        return scan.damaged(f->offset, "it does not begin with a start frame");
      }
      started = true;
    } else {
      if (f->kind != FrameKind::kStep) return scan.damaged(f->offset, "a second start frame");
      SLUICE_ASSIGN_OR_RETURN(std::uint64_t n, peek_step_number(f->payload));
      if (n != last + 1) {
        return scan.damaged(f->offset,
                            "step " + std::to_string(n) + " after step " + std::to_string(last));
      }
      last = n;
    }
    keep = f->end;
    if (last == step) break;
  }
  if (!started || last != step) {
    return core::failed_precondition("batch record '" + path + "' ends at step " +
                                     std::to_string(last) + ", before the checkpoint's step " +
                                     std::to_string(step));
  }
  scan.in.close();
  if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0) {
    return core::unavailable("batch record '" + path + "': cannot cut it to step " +
                             std::to_string(step) + ": " + errno_text());
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0)
    return core::unavailable("batch record '" + path + "': cannot open it: " + errno_text());
  std::unique_ptr<BatchRecordWriter> w(new BatchRecordWriter(path, fd, keep, step));
  SLUICE_TRY(w->sync());
  return w;
}

core::Status BatchRecordWriter::append(const RecordedStep& step) {
  if (step.step != last_step_ + 1) {
    return core::invalid_argument("batch record '" + path_ + "': step " +
                                  std::to_string(step.step) + " after step " +
                                  std::to_string(last_step_));
  }
  SLUICE_TRY(write_all(encode_frame(FrameKind::kStep, encode_step(step))));
  last_step_ = step.step;
  return {};
}

core::Status BatchRecordWriter::sync() {
  if (::fsync(fd_) != 0)
    return core::unavailable("batch record '" + path_ + "': fsync failed: " + errno_text());
  return {};
}

}  // namespace sluice::actor
