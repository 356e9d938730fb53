#include "actor/sim_policy.hpp"

#include <string>
#include <string_view>

#include "actor/checkpoint.hpp"
#include "core/bytes.hpp"
#include "core/checksum.hpp"
#include "core/units.hpp"

namespace sluice::actor {

namespace {

// State file: magic "SLUICESP", format version (u32), updates (u64), weight bytes (u64), the
// weights, chunk_checksum of everything before (u64).
constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'S', 'P'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes =
    sizeof(kMagic) + sizeof(std::uint32_t) + 2 * sizeof(std::uint64_t);

class SimPolicy final : public Policy {
 public:
  explicit SimPolicy(const SimPolicyOptions& o) : options_(o), weights_(o.weight_bytes) {
    core::fill_pseudo_random(weights_.data(), weights_.size(), 7);
  }

  core::Result<nlohmann::json> train(const std::vector<Sample>& batch,
                                     const std::function<void(double)>& wait) override {
    std::uint64_t tokens = 0;
    double reward = 0;
    for (const auto& s : batch) {
      reward += s.trajectory.reward;
      if (s.weight <= 0) continue;
      tokens += s.trajectory.response_tokens.size();
    }
    wait(options_.train_ms_fixed + options_.train_ms_per_token * static_cast<double>(tokens));
    ++updates_;
    // The first 8 bytes count the updates, so each version's weights differ.
    core::ByteWriter(weights_.data(), weights_.size()).u64(updates_);
    return nlohmann::json{
        {"reward_mean", batch.empty() ? 0.0 : reward / static_cast<double>(batch.size())}};
  }

  std::vector<TensorView> tensors() override {
    return {{"sim.weights", "U8", {weights_.size()}, weights_.data(), weights_.size()}};
  }

  core::Status save_state(const std::string& path) override {
    std::string out;
    core::ByteWriter w(out);
    w.put(kMagic, sizeof(kMagic)).u32(kFormatVersion).u64(updates_).u64(weights_.size());
    w.put(weights_.data(), weights_.size());
    w.u64(core::chunk_checksum(out.data(), out.size()));
    return write_file_atomic(path, out).with_context("sim policy state");
  }

  core::Status load_state(const std::string& path) override {
    const std::uint64_t want = kHeaderBytes + weights_.size() + sizeof(std::uint64_t);
    auto read = read_file(path, want);
    if (read.status().code() == core::Code::kDataLoss) {
      return core::invalid_argument("sim policy state '" + path + "' is larger than a state of " +
                                    std::to_string(weights_.size()) + " weight bytes");
    }
    SLUICE_ASSIGN_OR_RETURN(std::string in, std::move(read));
    auto damaged = [&](const std::string& what) {
      return core::data_loss("sim policy state '" + path + "' is damaged: " + what);
    };
    if (in.size() < kHeaderBytes + sizeof(std::uint64_t)) return damaged("too short");
    // The checksum trails what it covers; the header and weights are read from the front.
    const std::size_t end = in.size() - sizeof(std::uint64_t);
    core::ByteReader r(in.data(), end);
    if (r.view(sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) {
      return damaged("not a state file");
    }
    const std::uint64_t checksum = core::ByteReader(in.data() + end, sizeof(std::uint64_t)).u64();
    if (core::chunk_checksum(in.data(), end) != checksum) return damaged("checksum mismatch");
    if (r.u32() != kFormatVersion) {
      return core::invalid_argument("sim policy state '" + path + "': unknown format version");
    }
    const std::uint64_t updates = r.u64();
    const std::uint64_t size = r.u64();
    if (size != weights_.size()) {
      return core::invalid_argument("sim policy state '" + path + "' holds " +
                                    std::to_string(size) + " weight bytes, this policy " +
                                    std::to_string(weights_.size()));
    }
    if (r.left() != size) return damaged("wrong size");
    updates_ = updates;
    r.copy(weights_.data(), size);
    return {};
  }

 private:
  SimPolicyOptions options_;
  std::vector<std::uint8_t> weights_;
  std::uint64_t updates_ = 0;
};

}  // namespace

std::unique_ptr<Policy> make_sim_policy(const SimPolicyOptions& options) {
  return std::make_unique<SimPolicy>(options);
}

}  // namespace sluice::actor
