// The batch record's format and files: every field of a step round-trips; a payload that ends
// early or runs on is refused naming the field; a torn, corrupted or reordered file is data_loss
// naming the byte; a resume cuts the file back to the checkpoint's step, and a record that cannot
// be continued is moved aside.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "actor/batch_record.hpp"
#include "actor/batch_record_file.hpp"
#include "actor/batch_recorder.hpp"

using namespace sluice;
using namespace sluice::actor;
namespace fs = std::filesystem;

namespace {

Sample sample(const std::string& id, std::int32_t first_token) {
  Sample s;
  rl::Trajectory& t = s.trajectory;
  t.id = id;
  t.prompt_id = id.substr(0, id.find('/'));
  t.rollout = "rollout-1";
  t.version = 3;
  t.versions = {3, 4};
  t.prompt_tokens = {1, 5, 6, first_token};
  t.response_tokens = {7, 8, 2};
  t.logprobs = {-0.5f, -1.25f, -0.0f};
  t.reward = 0.75;
  t.loss_mask = {1, 0, 1};
  t.token_versions = {3, 0, 4};
  t.turns = 2;
  s.weight = 0.5;
  s.staleness = 2;
  return s;
}

RecordedStep step(std::uint64_t n) {
  RecordedStep s;
  s.step = n;
  s.actor_version = n + 1;
  s.optimizer_step = n - 1;
  s.lr = 5e-5f;
  s.loss = -0.125 * static_cast<double>(n);
  s.grad_norm = 0.5;
  s.batch = {sample("p0/0", static_cast<std::int32_t>(n)), sample("p0/1", -1)};
  s.weights_digest.bytes[0] = static_cast<std::uint8_t>(n);
  return s;
}

RecordStart start() {
  RecordStart s;
  s.learner_config = R"({"algorithm":"grpo"})";
  s.blas_threads = 1;
  s.weights = {1.0f, -2.0f, 0.5f};
  s.weights_digest = core::chunk_digest(s.weights.data(), s.weights.size() * sizeof(float));
  return s;
}

void check_same(const RecordedStep& a, const RecordedStep& b) {
  CHECK(a.step == b.step);
  CHECK(a.actor_version == b.actor_version);
  CHECK(a.optimizer_step == b.optimizer_step);
  CHECK(a.lr == b.lr);
  CHECK(a.loss == b.loss);
  CHECK(a.grad_norm == b.grad_norm);
  CHECK(a.weights_digest == b.weights_digest);
  REQUIRE(a.batch.size() == b.batch.size());
  for (std::size_t i = 0; i < a.batch.size(); ++i) {
    const rl::Trajectory &x = a.batch[i].trajectory, &y = b.batch[i].trajectory;
    CHECK(x.id == y.id);
    CHECK(x.prompt_id == y.prompt_id);
    CHECK(x.rollout == y.rollout);
    CHECK(x.version == y.version);
    CHECK(x.versions == y.versions);
    CHECK(x.prompt_tokens == y.prompt_tokens);
    CHECK(x.response_tokens == y.response_tokens);
    CHECK(x.logprobs == y.logprobs);
    CHECK(x.reward == y.reward);
    CHECK(x.loss_mask == y.loss_mask);
    CHECK(x.token_versions == y.token_versions);
    CHECK(x.turns == y.turns);
    CHECK(a.batch[i].weight == b.batch[i].weight);
    CHECK(a.batch[i].staleness == b.batch[i].staleness);
  }
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("batch_record_test." + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spill(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A record of steps 1..n at `path`.
void write_record(const fs::path& path, std::uint64_t n) {
  auto w = BatchRecordWriter::create(path.string(), start());
  REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
  for (std::uint64_t i = 1; i <= n; ++i)
    REQUIRE((*w)->append(step(i)).is_ok());
  REQUIRE((*w)->sync().is_ok());
}

// Every step of the record at `path`, or the first error.
core::Result<std::vector<RecordedStep>> read_all(const fs::path& path) {
  SLUICE_ASSIGN_OR_RETURN(auto r, BatchRecordReader::open(path.string()));
  std::vector<RecordedStep> out;
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(std::optional<RecordedStep> s, r->next());
    if (!s) return out;
    out.push_back(std::move(*s));
  }
}

}  // namespace

TEST_CASE("batch record: a step and a start round-trip through their encodings") {
  const RecordedStep s = step(7);
  auto back = decode_step(encode_step(s));
  REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
  check_same(s, *back);
  CHECK(peek_step_number(encode_step(s)).value() == 7);

  auto st = decode_start(encode_start(start()));
  REQUIRE(st.is_ok());
  CHECK(st->learner_config == start().learner_config);
  CHECK(st->weights == start().weights);
  CHECK(st->weights_digest == start().weights_digest);
}

TEST_CASE("batch record: a payload that ends early or runs on is refused, naming the field") {
  const std::string bytes = encode_step(step(1));
  for (std::size_t cut : {std::size_t{4}, std::size_t{60}, bytes.size() - 1}) {
    auto r = decode_step(std::string_view(bytes).substr(0, cut));
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == core::Code::kDataLoss);
    MESSAGE(r.status().message());
    CHECK((r.status().message().find("ends early") != std::string::npos ||
           r.status().message().find("runs past the end") != std::string::npos));
  }
  auto extra = decode_step(bytes + "x");
  REQUIRE_FALSE(extra.is_ok());
  CHECK(extra.status().message().find("left over") != std::string::npos);
  // A sample count far beyond the bytes is refused before anything is allocated.
  std::string huge = bytes;
  huge[44] = huge[45] = huge[46] = huge[47] = '\xff';  // the sample count after the fixed fields
  auto big = decode_step(huge);
  REQUIRE_FALSE(big.is_ok());
  CHECK(big.status().message().find("sample count") != std::string::npos);
  // Start weights that do not match their digest.
  RecordStart bad = start();
  bad.weights[1] = 3.0f;
  auto st = decode_start(encode_start(bad));
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.status().message().find("digest") != std::string::npos);
}

TEST_CASE("batch record: a file is read back step by step, in order") {
  TempDir dir;
  const fs::path path = dir.path / "actor-batches.bin";
  write_record(path, 3);
  auto steps = read_all(path);
  REQUIRE_MESSAGE(steps.is_ok(), steps.status().to_string());
  REQUIRE(steps->size() == 3);
  for (std::uint64_t i = 0; i < 3; ++i)
    check_same((*steps)[i], step(i + 1));
  auto r = BatchRecordReader::open(path.string());
  REQUIRE(r.is_ok());
  CHECK((*r)->start().weights == start().weights);
}

TEST_CASE("batch record: a damaged file is data_loss naming where") {
  TempDir dir;
  const fs::path path = dir.path / "actor-batches.bin";
  write_record(path, 3);
  const std::string good = slurp(path);

  SUBCASE("a torn last frame") {
    spill(path, good.substr(0, good.size() - 10));
    auto r = read_all(path);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == core::Code::kDataLoss);
    CHECK(r.status().message().find("torn") != std::string::npos);
  }
  SUBCASE("one flipped byte in a step") {
    std::string bad = good;
    bad[bad.size() - 100] ^= 0x01;
    spill(path, bad);
    auto r = read_all(path);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("checksum mismatch") != std::string::npos);
    CHECK(r.status().message().find("at byte") != std::string::npos);
  }
  SUBCASE("not a record") {
    spill(path, "SLUICEXX" + good.substr(8));
    auto r = BatchRecordReader::open(path.string());
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("not a batch record") != std::string::npos);
  }
  SUBCASE("another format version") {
    std::string bad = good;
    bad[8] = 9;
    spill(path, bad);
    auto r = BatchRecordReader::open(path.string());
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == core::Code::kInvalidArgument);
  }
  SUBCASE("a step missing from the middle") {
    auto w = BatchRecordWriter::create(path.string(), start());
    REQUIRE(w.is_ok());
    REQUIRE((*w)->append(step(1)).is_ok());
    // The writer refuses a gap; a file with one (written by hand) is refused on reading.
    CHECK((*w)->append(step(3)).code() == core::Code::kInvalidArgument);
    w->reset();
    std::ofstream(path, std::ios::binary | std::ios::app)
        << encode_frame(FrameKind::kStep, encode_step(step(3)));
    auto r = read_all(path);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("step 3 after step 1") != std::string::npos);
  }
  CHECK(BatchRecordReader::open((dir.path / "none.bin").string()).status().code() ==
        core::Code::kNotFound);
}

TEST_CASE("batch record: a resume cuts the file back to the checkpoint's step") {
  TempDir dir;
  const fs::path path = dir.path / "actor-batches.bin";
  write_record(path, 4);
  // A killed writer's torn frame after step 4.
  const std::string torn = encode_frame(FrameKind::kStep, encode_step(step(5)));
  std::ofstream(path, std::ios::binary | std::ios::app) << torn.substr(0, torn.size() / 2);

  auto w = BatchRecordWriter::resume(path.string(), 2);
  REQUIRE_MESSAGE(w.is_ok(), w.status().to_string());
  CHECK((*w)->last_step() == 2);
  // The restarted actor trains step 3 on another batch.
  RecordedStep again = step(3);
  again.batch.pop_back();
  REQUIRE((*w)->append(again).is_ok());
  REQUIRE((*w)->sync().is_ok());
  w->reset();
  auto steps = read_all(path);
  REQUIRE_MESSAGE(steps.is_ok(), steps.status().to_string());
  REQUIRE(steps->size() == 3);
  check_same((*steps)[1], step(2));
  check_same((*steps)[2], again);

  // Step 0: the start frame alone stays (a checkpoint before the first step).
  REQUIRE(BatchRecordWriter::resume(path.string(), 0).is_ok());
  CHECK(read_all(path)->empty());
  // A record that ends before the checkpoint's step cannot be continued.
  auto short_record = BatchRecordWriter::resume(path.string(), 5);
  REQUIRE_FALSE(short_record.is_ok());
  CHECK(short_record.status().code() == core::Code::kFailedPrecondition);
  CHECK(short_record.status().message().find("ends at step 0") != std::string::npos);
}

TEST_CASE("batch record: a recorder that cannot continue its record moves it aside") {
  TempDir dir;
  const fs::path path = dir.path / "actor-batches.bin";
  write_record(path, 2);
  BatchRecorder ok(path.string());
  ok.resume(1);
  CHECK(ok.active());
  CHECK(ok.bytes() == fs::file_size(path));

  // A checkpoint at step 5 with a record of one step: the record cannot describe the weights.
  BatchRecorder behind(path.string());
  behind.resume(5);
  CHECK_FALSE(behind.active());
  CHECK_FALSE(fs::exists(path));
  CHECK(fs::exists(dir.path / "actor-batches.bin.incomplete"));
  behind.sync();  // records nothing, fails nothing
}
