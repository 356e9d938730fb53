#include "rollout/sim_engine.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>

#include "core/checksum.hpp"
#include "core/lognormal.hpp"
#include "core/splitmix.hpp"
#include "rl/trajectory.hpp"

namespace sluice::rollout {

namespace {

using core::kSplitMixGamma;
using core::mix64;

// A uniform in the open interval (0, 1) from the top 53 bits.
double to_unit(std::uint64_t x) {
  return (static_cast<double>(x >> 11) + 0.5) * 0x1.0p-53;
}

// The per-trajectory key every draw derives from: XXH3 of the id mixed with the seed.
std::uint64_t trajectory_key(std::uint64_t seed, const std::string& id) {
  return mix64(core::chunk_checksum(id.data(), id.size()) ^ mix64(seed + kSplitMixGamma));
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

}  // namespace

core::Status LengthConfig::validate() const {
  if (max_len == 0) return core::invalid_argument("lengths: max_len must be at least 1");
  if (kind == "lognormal") {
    if (!(median >= 1.0)) return core::invalid_argument("lengths: median must be at least 1");
    if (!(p99 >= median) || !std::isfinite(p99)) {
      return core::invalid_argument("lengths: p99 must be finite and at least the median");
    }
    return {};
  }
  if (kind == "file") {
    if (file.empty()) return core::invalid_argument("lengths: kind file needs 'file'");
    return {};
  }
  return core::invalid_argument("lengths: kind must be lognormal or file, not '" + kind + "'");
}

core::Status SimEngineConfig::validate() const {
  if (max_sequences == 0) return core::invalid_argument("max_sequences must be at least 1");
  if (max_kv_tokens == 0) return core::invalid_argument("max_kv_tokens must be at least 1");
  auto non_negative = [](double x) { return x >= 0.0 && std::isfinite(x); };
  if (!non_negative(t0_ms) || !non_negative(t1_ms) || !non_negative(prefill_ms_per_token)) {
    return core::invalid_argument("t0_ms, t1_ms and prefill_ms_per_token must be finite and >= 0");
  }
  if (!non_negative(time_scale)) {
    return core::invalid_argument("time_scale must be finite and >= 0");
  }
  if (turns == 0 || turns > rl::kMaxTurns) {
    return core::invalid_argument("turns must be in [1, " + std::to_string(rl::kMaxTurns) + "]");
  }
  return lengths.validate();
}

core::Result<LengthSampler> LengthSampler::create(const LengthConfig& config, std::uint64_t seed) {
  SLUICE_TRY(config.validate());
  LengthSampler s;
  s.config_ = config;
  s.seed_ = seed;
  if (config.kind == "lognormal") {
    SLUICE_ASSIGN_OR_RETURN(s.lognormal_,
                            core::Lognormal::from_median_p99(config.median, config.p99, "lengths"));
    return s;
  }
  std::ifstream in(config.file);
  if (!in) return core::invalid_argument("lengths: cannot read '" + config.file + "'");
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || v == 0) {
      return core::invalid_argument("lengths: " + config.file + ":" + std::to_string(line_no) +
                                    ": '" + t + "' is not a positive integer");
    }
    s.table_.push_back(std::min(v, config.max_len));
  }
  if (s.table_.empty()) {
    return core::invalid_argument("lengths: '" + config.file + "' holds no lengths");
  }
  return s;
}

std::uint64_t LengthSampler::length(const std::string& trajectory_id) const {
  const std::uint64_t key = trajectory_key(seed_, trajectory_id);
  if (!table_.empty()) return table_[mix64(key + 1) % table_.size()];
  const double x = lognormal_.draw(key);
  // Truncated (clamped) at max_len: very long draws become max_len, like a generation limit.
  if (!(x < static_cast<double>(config_.max_len))) return config_.max_len;
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(x)));
}

core::Result<LengthStats> length_stats(const LengthConfig& config, std::uint64_t seed,
                                       std::size_t n) {
  SLUICE_ASSIGN_OR_RETURN(LengthSampler sampler, LengthSampler::create(config, seed));
  std::vector<std::uint64_t> lengths(n);
  for (std::size_t i = 0; i < n; ++i)
    lengths[i] = sampler.length("length-stats/" + std::to_string(i));
  return rl::summarize_lengths(std::move(lengths));
}

core::Result<std::unique_ptr<SimEngine>> SimEngine::create(const SimEngineConfig& config) {
  SLUICE_TRY(config.validate());
  SLUICE_ASSIGN_OR_RETURN(LengthSampler lengths,
                          LengthSampler::create(config.lengths, config.seed));
  return std::unique_ptr<SimEngine>(new SimEngine(config, std::move(lengths)));
}

core::Status SimEngine::load_weights(std::uint64_t version, const std::uint8_t* /*data*/,
                                     std::uint64_t /*bytes*/, bool allow_active) {
  if (!seqs_.empty() && !allow_active) {
    return core::failed_precondition("sim engine: cannot load version " + std::to_string(version) +
                                     " with " + std::to_string(seqs_.size()) +
                                     " active sequences of version " + std::to_string(version_));
  }
  // A sequence continued on new weights has a KV cache computed with the old ones: it is
  // recomputed (re-prefilled) with the new weights before its next token, as partial-rollout
  // systems do when they interrupt generation for a weight update.
  if (version != version_) {
    for (auto& a : seqs_) {
      a.prefilled = false;
      a.cached = 0;
    }
  }
  version_ = version;
  return {};
}

bool SimEngine::can_admit(std::uint64_t kv_tokens) const {
  return fits(capacity(), seqs_.size(), kv_used_, kv_tokens);
}

core::Status SimEngine::admit(SequenceState seq) {
  SLUICE_TRY(check_sequence("sim engine", seq));
  const std::string& id = seq.trajectory_id;
  for (const auto& a : seqs_) {
    if (a.state.trajectory_id == id) {
      return core::Status(core::Code::kAlreadyExists,
                          "sim engine: sequence " + id + " is already active");
    }
  }
  const std::uint64_t kv = seq.kv_tokens();
  SLUICE_TRY(check_room("sim engine", capacity(), id, seqs_.size(), kv_used_, kv));
  if (seq.generated.empty() && seq.rng_state == 0) {
    seq.rng_state = mix64(trajectory_key(config_.seed, id) ^ 0x5eed5eed5eed5eedULL);
  }
  if (!seq.is_episode() && (seq.versions.empty() || seq.versions.back() != version_)) {
    seq.versions.push_back(version_);
  }
  Active a;
  a.target = std::min(lengths_.length(id), seq.max_new_tokens);
  // A modelled cache of these weights, back with an episode from its environment.
  if (seq.kv && seq.kv->version == version_ && seq.kv->positions < kv) a.cached = seq.kv->positions;
  seq.kv.reset();
  a.state = std::move(seq);
  kv_used_ += kv;
  seqs_.push_back(std::move(a));
  return {};
}

StepResult SimEngine::step() {
  StepResult r;
  if (seqs_.empty()) return r;
  for (auto& a : seqs_) {
    if (a.prefilled) continue;
    r.prefill_tokens += a.state.kv_tokens() - a.cached;
    a.prefilled = true;
  }
  std::vector<Active> still;
  still.reserve(seqs_.size());
  for (auto& a : seqs_) {
    SequenceState& s = a.state;
    // A migrated sequence may arrive already complete (its source's length was shorter); it
    // finishes without decoding.
    const std::uint64_t model = model_tokens(s);
    if (model < a.target && !s.awaits_environment()) {
      const std::uint64_t z = core::splitmix64(s.rng_state);
      auto token = static_cast<std::int32_t>(z % kSimVocab);
      if (s.is_episode()) {
        // Only a turn's end calls.
        if (token == s.call_token) token = (token + 1) % kSimVocab;
        if (ends_turn(a.target, model + 1)) token = s.call_token;
      }
      // Log-probs in (-4.01, -0.01): sampled tokens of a plausible policy, never exactly 0.
      record_sample(s, token, static_cast<float>(-(0.01 + 4.0 * to_unit(z))), version_);
      ++kv_used_;
      ++r.tokens;
      ++r.batch;
    }
    if (model_tokens(s) >= a.target || s.awaits_environment()) {
      kv_used_ -= s.kv_tokens();
      if (s.awaits_environment()) {
        // The modelled cache leaves with it: its shape only (all but the call).
        s.kv.emplace();
        s.kv->version = version_;
        s.kv->positions = static_cast<std::uint32_t>(s.kv_tokens() - 1);
      }
      r.finished.push_back(std::move(s));
    } else {
      still.push_back(std::move(a));
    }
  }
  seqs_ = std::move(still);
  const double ms = config_.t0_ms + config_.t1_ms * static_cast<double>(r.batch) +
                    config_.prefill_ms_per_token * static_cast<double>(r.prefill_tokens);
  r.wait_s = ms * config_.time_scale / 1000.0;
  return r;
}

std::uint64_t SimEngine::model_tokens(const SequenceState& s) {
  if (!s.is_episode()) return s.generated.size();
  return static_cast<std::uint64_t>(std::count(s.loss_mask.begin(), s.loss_mask.end(), 1));
}

bool SimEngine::ends_turn(std::uint64_t target, std::uint64_t model_tokens) const {
  // Turn i (1-based) ends at round(target x i / turns) model tokens; the last one has no call.
  const std::uint32_t turns = config_.turns;
  if (turns <= 1 || model_tokens >= target) return false;
  for (std::uint32_t i = 1; i < turns; ++i) {
    const auto end = static_cast<std::uint64_t>(
        std::llround(static_cast<double>(target) * i / static_cast<double>(turns)));
    if (end == model_tokens) return true;
  }
  return false;
}

core::Result<SequenceState> SimEngine::export_sequence(const std::string& trajectory_id) {
  return take_sequence(seqs_, trajectory_id, kv_used_, "sim engine", [](Active&) {});
}

std::vector<SequenceState> SimEngine::export_all() {
  return take_all(seqs_, kv_used_, [](Active&) {});
}

std::vector<SequenceState> SimEngine::snapshot() const {
  return snapshot_of(seqs_);
}

std::vector<ActiveSequence> SimEngine::active_sequences() const {
  return active_sequences_of(seqs_);
}

}  // namespace sluice::rollout
