#include "actor/sim_policy.hpp"

#include <cstring>
#include <string>

#include "actor/checkpoint.hpp"
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
    std::memcpy(weights_.data(), &updates_, sizeof(updates_));
    return nlohmann::json{
        {"reward_mean", batch.empty() ? 0.0 : reward / static_cast<double>(batch.size())}};
  }

  std::vector<TensorView> tensors() override {
    return {{"sim.weights", "U8", {weights_.size()}, weights_.data(), weights_.size()}};
  }

  core::Status save_state(const std::string& path) override {
    std::string out(kMagic, sizeof(kMagic));
    put(out, kFormatVersion);
    put(out, updates_);
    put(out, static_cast<std::uint64_t>(weights_.size()));
    out.append(reinterpret_cast<const char*>(weights_.data()), weights_.size());
    put(out, core::chunk_checksum(out.data(), out.size()));
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
    if (std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) return damaged("not a state file");
    const std::size_t end = in.size() - sizeof(std::uint64_t);
    if (core::chunk_checksum(in.data(), end) != get<std::uint64_t>(in, end)) {
      return damaged("checksum mismatch");
    }
    if (get<std::uint32_t>(in, sizeof(kMagic)) != kFormatVersion) {
      return core::invalid_argument("sim policy state '" + path + "': unknown format version");
    }
    const auto size = get<std::uint64_t>(in, kHeaderBytes - sizeof(std::uint64_t));
    if (size != weights_.size()) {
      return core::invalid_argument("sim policy state '" + path + "' holds " +
                                    std::to_string(size) + " weight bytes, this policy " +
                                    std::to_string(weights_.size()));
    }
    if (end != kHeaderBytes + size) return damaged("wrong size");
    updates_ = get<std::uint64_t>(in, sizeof(kMagic) + sizeof(std::uint32_t));
    std::memcpy(weights_.data(), in.data() + kHeaderBytes, size);
    return {};
  }

 private:
  template <typename T>
  static void put(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  template <typename T>
  static T get(const std::string& in, std::size_t at) {
    T v{};
    std::memcpy(&v, in.data() + at, sizeof(v));
    return v;
  }

  SimPolicyOptions options_;
  std::vector<std::uint8_t> weights_;
  std::uint64_t updates_ = 0;
};

}  // namespace

std::unique_ptr<Policy> make_sim_policy(const SimPolicyOptions& options) {
  return std::make_unique<SimPolicy>(options);
}

}  // namespace sluice::actor
