// The actor's batch record: every batch the learner trained on, in the order it trained, with
// what it needs to train on them again (its starting weights and configuration) and what it
// produced (a digest of the weights after each step), so that `sluice replay RUN_DIR` can
// reproduce a run's updates bit for bit, or feed the same batches to another learner setting.
// This header is the format alone; actor/batch_record_file.hpp reads and writes files of it.
//
// On disk (RUN_DIR/actor-batches.bin), little-endian, through core::ByteReader/ByteWriter:
//   file header   magic "SLUICEBR" (8 bytes), format version (u32)
//   then frames   kind (u32: 1 start, 2 step), payload length (u64), payload,
//                 chunk_checksum (XXH3) of kind, length and payload (u64)
// The first frame is a start frame, then one step frame per training step, steps 1, 2, ... in
// order (after an actor's restart the file is cut back to its checkpoint's step first, so the
// steps stay consecutive).
//   start payload  learner config (u32 length + JSON text: LearnerConfig::describe), BLAS
//                  threads (u32), parameter count (u64) and the weights (f32 each, as
//                  model::Gpt::params() holds them), their SHA-256 (32 bytes)
//   step payload   step (u64), actor version (u64), optimizer step (u64), lr (f32), loss (f64),
//                  grad_norm (f64), sample count (u32) and the samples, the SHA-256 of the
//                  weights after the step (32 bytes)
//   sample         id, prompt_id, rollout (u32 length + bytes each), version (u64), versions
//                  (u32 count + u64 each), prompt tokens, response tokens (u32 count + i32
//                  each), behaviour log-probs (f32, one per response token), reward (f64),
//                  loss_mask (u32 count + u8 each), token_versions (u32 count + u64 each),
//                  turns (u32), weight (f64), staleness (u64)
//
// Errors: decoders check every count against the bytes left before allocating; a payload that
// ends early, has bytes left over or breaks a rule above is data_loss naming the field.
//
// Thread safety: pure functions and plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actor/experience_buffer.hpp"
#include "core/checksum.hpp"
#include "core/status.hpp"

namespace sluice::actor {

inline constexpr char kBatchRecordMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'B', 'R'};
inline constexpr std::uint32_t kBatchRecordVersion = 1;
inline constexpr std::size_t kBatchRecordHeaderBytes = 12;  // magic + version
inline constexpr std::size_t kFrameHeadBytes = 12;          // kind + payload length
inline constexpr std::size_t kFrameTailBytes = 8;           // checksum
// A payload beyond this is damage (a step of the default job is about 100 KB; the start frame
// holds the weights, 1.4 MB for the default model).
inline constexpr std::uint64_t kMaxFramePayload = 1ull << 30;

enum class FrameKind : std::uint32_t { kStart = 1, kStep = 2 };

// What the learner started RL from: the weights after its warm start (or restored for a
// learner that has none) and the configuration that built it.
struct RecordStart {
  std::string learner_config;  // LearnerConfig as JSON text (core::config::to_json)
  std::uint32_t blas_threads = 1;
  std::vector<float> weights;
  core::Digest weights_digest;  // SHA-256 of the weights' bytes
};

// One training step as the trainer took it.
struct RecordedStep {
  std::uint64_t step = 0;            // the trainer's step, from 1
  std::uint64_t actor_version = 0;   // the version it trained at (it then published the next)
  std::uint64_t optimizer_step = 0;  // the learner's RL optimizer steps before this one
  float lr = 0.0f;                   // the learning rate of its (first) optimizer step
  double loss = 0.0;                 // as the learner reported it
  double grad_norm = 0.0;
  std::vector<Sample> batch;    // in the order trained on, weight-0 samples included
  core::Digest weights_digest;  // SHA-256 of the weights after the step
};

// The file header.
std::string encode_record_header();
// Checks a file header (kBatchRecordHeaderBytes): not a record is data_loss, another format
// version invalid_argument.
core::Status check_record_header(std::string_view bytes);

// One frame around `payload`.
std::string encode_frame(FrameKind kind, std::string_view payload);
// The checksum a frame ends with, over its head and payload.
std::uint64_t frame_checksum(std::string_view head, std::string_view payload);

std::string encode_start(const RecordStart& start);
core::Result<RecordStart> decode_start(std::string_view payload);
std::string encode_step(const RecordedStep& step);
core::Result<RecordedStep> decode_step(std::string_view payload);
// A step payload's step number alone (its first field), without decoding the rest.
core::Result<std::uint64_t> peek_step_number(std::string_view payload);

}  // namespace sluice::actor
