#include "actor/batch_record.hpp"

#include <limits>

#include "core/bytes.hpp"

namespace sluice::actor {

namespace {

using core::ByteReader;
using core::ByteWriter;

// ---- writing ----

void put_string(ByteWriter& w, std::string_view s) {
  w.u32(static_cast<std::uint32_t>(s.size())).put(s);
}

template <typename T>
void put_ints(ByteWriter& w, const std::vector<T>& v) {
  w.u32(static_cast<std::uint32_t>(v.size()));
  for (T x : v)
    w.u(static_cast<std::uint64_t>(x), sizeof(T));
}

void put_digest(ByteWriter& w, const core::Digest& d) {
  w.put(d.bytes.data(), d.bytes.size());
}

void put_sample(ByteWriter& w, const Sample& s) {
  const rl::Trajectory& t = s.trajectory;
  put_string(w, t.id);
  put_string(w, t.prompt_id);
  put_string(w, t.rollout);
  w.u64(t.version);
  put_ints(w, t.versions);
  put_ints(w, t.prompt_tokens);
  put_ints(w, t.response_tokens);
  // One per response token (the learner refuses a trajectory where they differ; a shorter list
  // is padded so the record still decodes, and the replayed learner refuses it the same way).
  for (std::size_t i = 0; i < t.response_tokens.size(); ++i)
    w.f32(i < t.logprobs.size() ? t.logprobs[i] : 0.0f);
  w.f64(t.reward);
  put_ints(w, t.loss_mask);
  put_ints(w, t.token_versions);
  w.u32(t.turns);
  w.f64(s.weight);
  w.u64(s.staleness);
}

// ---- reading ----

// A cursor over one payload whose first failure names what it was reading.
class Fields {
 public:
  explicit Fields(std::string_view payload) : r_(payload) {}

  bool failed() const { return !error_.empty(); }
  core::Status status(const std::string& what) const {
    if (!failed() && !r_.at_end()) {
      return core::data_loss("batch record: " + what + ": " + std::to_string(r_.left()) +
                             " bytes left over");
    }
    if (!failed()) return {};
    return core::data_loss("batch record: " + what + ": " + error_);
  }

  std::uint32_t u32(const char* field) { return check(r_.u32(), field); }
  std::uint64_t u64(const char* field) { return check(r_.u64(), field); }
  float f32(const char* field) { return check(r_.f32(), field); }
  double f64(const char* field) { return check(r_.f64(), field); }

  std::string string(const char* field) {
    const std::size_t n = count(field, 1);
    return std::string(check(r_.view(n), field));
  }
  template <typename T>
  std::vector<T> ints(const char* field) {
    const std::size_t n = count(field, sizeof(T));
    std::vector<T> v;
    v.reserve(n);
    for (std::size_t i = 0; i < n && !failed(); ++i)
      v.push_back(static_cast<T>(check(r_.u(sizeof(T)), field)));
    return v;
  }
  std::vector<float> floats(std::size_t n, const char* field) {
    std::vector<float> v;
    if (r_.left() / sizeof(float) < n) {
      fail(field, "ends early");
      return v;
    }
    v.resize(n);
    check(r_.copy(v.data(), n * sizeof(float)), field);
    return v;
  }
  core::Digest digest(const char* field) {
    core::Digest d;
    check(r_.copy(d.bytes.data(), d.bytes.size()), field);
    return d;
  }
  // A count of items of `item_bytes` each, checked against the bytes left.
  std::size_t count(const char* field, std::size_t item_bytes) {
    const std::uint32_t n = u32(field);
    if (failed()) return 0;
    if (r_.left() / item_bytes < n) {
      fail(field, std::to_string(n) + " runs past the end");
      return 0;
    }
    return n;
  }
  void fail(const char* field, const std::string& why) {
    if (error_.empty()) error_ = std::string(field) + " " + why;
  }

 private:
  template <typename T>
  T check(T v, const char* field) {
    if (!r_.ok()) fail(field, "ends early");
    return v;
  }

  ByteReader r_;
  std::string error_;
};

Sample get_sample(Fields& f) {
  Sample s;
  rl::Trajectory& t = s.trajectory;
  t.id = f.string("id");
  t.prompt_id = f.string("prompt_id");
  t.rollout = f.string("rollout");
  t.version = f.u64("version");
  t.versions = f.ints<std::uint64_t>("versions");
  t.prompt_tokens = f.ints<std::int32_t>("prompt tokens");
  t.response_tokens = f.ints<std::int32_t>("response tokens");
  t.logprobs = f.floats(t.response_tokens.size(), "log-probs");
  t.reward = f.f64("reward");
  t.loss_mask = f.ints<std::uint8_t>("loss_mask");
  t.token_versions = f.ints<std::uint64_t>("token_versions");
  t.turns = f.u32("turns");
  s.weight = f.f64("weight");
  s.staleness = f.u64("staleness");
  return s;
}

}  // namespace

std::string encode_record_header() {
  std::string out;
  ByteWriter(out).put(kBatchRecordMagic, sizeof(kBatchRecordMagic)).u32(kBatchRecordVersion);
  return out;
}

core::Status check_record_header(std::string_view bytes) {
  ByteReader r(bytes);
  if (r.view(sizeof(kBatchRecordMagic)) !=
      std::string_view(kBatchRecordMagic, sizeof(kBatchRecordMagic))) {
    return core::data_loss("batch record: not a batch record (bad magic)");
  }
  const std::uint32_t version = r.u32();
  if (!r.ok()) return core::data_loss("batch record: the file header ends early");
  if (version != kBatchRecordVersion) {
    return core::invalid_argument("batch record: format version " + std::to_string(version) +
                                  ", this build reads " + std::to_string(kBatchRecordVersion));
  }
  return {};
}

std::uint64_t frame_checksum(std::string_view head, std::string_view payload) {
  std::string covered;
  covered.reserve(head.size() + payload.size());
  covered.append(head).append(payload);
  return core::chunk_checksum(covered.data(), covered.size());
}

std::string encode_frame(FrameKind kind, std::string_view payload) {
  std::string out;
  ByteWriter w(out);
  w.u32(static_cast<std::uint32_t>(kind)).u64(payload.size());
  const std::uint64_t sum = frame_checksum(out, payload);
  w.put(payload).u64(sum);
  return out;
}

std::string encode_start(const RecordStart& start) {
  std::string out;
  ByteWriter w(out);
  put_string(w, start.learner_config);
  w.u32(start.blas_threads).u64(start.weights.size());
  w.put(start.weights.data(), start.weights.size() * sizeof(float));
  put_digest(w, start.weights_digest);
  return out;
}

core::Result<RecordStart> decode_start(std::string_view payload) {
  Fields f(payload);
  RecordStart s;
  s.learner_config = f.string("learner config");
  s.blas_threads = f.u32("blas threads");
  const std::uint64_t n = f.u64("parameter count");
  if (n > payload.size() / sizeof(float)) f.fail("parameter count", "runs past the end");
  if (!f.failed()) s.weights = f.floats(n, "weights");
  s.weights_digest = f.digest("weights digest");
  SLUICE_TRY(f.status("start frame"));
  if (core::chunk_digest(s.weights.data(), s.weights.size() * sizeof(float)) != s.weights_digest) {
    return core::data_loss("batch record: start frame: the weights do not match their digest");
  }
  return s;
}

std::string encode_step(const RecordedStep& step) {
  std::string out;
  ByteWriter w(out);
  w.u64(step.step).u64(step.actor_version).u64(step.optimizer_step);
  w.f32(step.lr).f64(step.loss).f64(step.grad_norm);
  w.u32(static_cast<std::uint32_t>(step.batch.size()));
  for (const Sample& s : step.batch)
    put_sample(w, s);
  put_digest(w, step.weights_digest);
  return out;
}

core::Result<RecordedStep> decode_step(std::string_view payload) {
  Fields f(payload);
  RecordedStep s;
  s.step = f.u64("step");
  s.actor_version = f.u64("actor version");
  s.optimizer_step = f.u64("optimizer step");
  s.lr = f.f32("lr");
  s.loss = f.f64("loss");
  s.grad_norm = f.f64("grad_norm");
  // The smallest sample is well over 64 bytes: a count beyond the payload's 64ths is damage.
  const std::size_t n = f.count("sample count", 64);
  s.batch.reserve(n);
  for (std::size_t i = 0; i < n && !f.failed(); ++i)
    s.batch.push_back(get_sample(f));
  s.weights_digest = f.digest("weights digest");
  SLUICE_TRY(f.status("step " + std::to_string(s.step)));
  return s;
}

core::Result<std::uint64_t> peek_step_number(std::string_view payload) {
  ByteReader r(payload);
  const std::uint64_t step = r.u64();
  if (!r.ok()) return core::data_loss("batch record: a step frame too short for its step");
  return step;
}

}  // namespace sluice::actor
