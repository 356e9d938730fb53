// Files of the actor's batch record (the format: actor/batch_record.hpp). The writer appends one
// frame per training step; a restarted actor cuts the file back to its checkpoint's step and
// appends from there, so the record always describes the updates that the weights went through.
// The reader reads it back frame by frame, checking each frame's checksum and the steps' order.
//
// Durability: the writer fsyncs on sync() (the trainer calls it before each checkpoint), so a
// checkpoint at step s always finds steps 1..s in the record; a kill can leave a torn last frame,
// which resume() cuts off with the steps past the checkpoint.
//
// Errors: a missing file is not_found; a damaged one (bad magic, a torn or corrupted frame, a
// frame of the wrong kind, steps out of order) data_loss naming the frame's byte offset; another
// format version invalid_argument; a file that ends before the step a resume needs is
// failed_precondition; a failed write or fsync unavailable.
//
// Thread safety: none; one thread uses a reader or a writer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "actor/batch_record.hpp"
#include "core/status.hpp"

namespace sluice::actor {

class BatchRecordReader {
 public:
  // Opens the record at `path` and reads its header and start frame.
  static core::Result<std::unique_ptr<BatchRecordReader>> open(const std::string& path);
  ~BatchRecordReader();
  BatchRecordReader(const BatchRecordReader&) = delete;
  BatchRecordReader& operator=(const BatchRecordReader&) = delete;

  const RecordStart& start() const { return start_; }
  // The next step (steps come 1, 2, ... in order), or nullopt at the file's clean end.
  core::Result<std::optional<RecordedStep>> next();
  // Bytes of the file read so far.
  std::uint64_t offset() const;

  struct Impl;

 private:
  BatchRecordReader(std::unique_ptr<Impl> impl, RecordStart start);
  std::unique_ptr<Impl> impl_;
  RecordStart start_;
  std::uint64_t last_step_ = 0;
};

class BatchRecordWriter {
 public:
  // A new record at `path` (replacing what was there): the file header and `start`, synced.
  static core::Result<std::unique_ptr<BatchRecordWriter>> create(const std::string& path,
                                                                 const RecordStart& start);
  // Continues the record at `path` after a resume from a checkpoint at step `step`: the file is
  // cut after that step's frame (after the start frame for step 0).
  static core::Result<std::unique_ptr<BatchRecordWriter>> resume(const std::string& path,
                                                                 std::uint64_t step);
  ~BatchRecordWriter();
  BatchRecordWriter(const BatchRecordWriter&) = delete;
  BatchRecordWriter& operator=(const BatchRecordWriter&) = delete;

  // Appends `step`, which must be the step after the last one (invalid_argument otherwise).
  core::Status append(const RecordedStep& step);
  // fsync: every step appended so far is on disk.
  core::Status sync();

  const std::string& path() const { return path_; }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t last_step() const { return last_step_; }

 private:
  BatchRecordWriter(std::string path, int fd, std::uint64_t bytes, std::uint64_t last_step);
  core::Status write_all(const std::string& bytes);

  std::string path_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  std::uint64_t last_step_ = 0;
};

}  // namespace sluice::actor
