#include "rollout/mode_policy.hpp"

#include <fmt/format.h>

namespace sluice::rollout {

core::Result<Mode> parse_mode(const std::string& s) {
  if (s == "sync") return Mode::kSync;
  if (s == "one-step-off") return Mode::kOneStepOff;
  if (s == "stream") return Mode::kStream;
  if (s == "partial-rollout") return Mode::kPartialRollout;
  if (s == "sluice") return Mode::kSluice;
  return core::invalid_argument(
      fmt::format("unknown mode '{}' (sync, one-step-off, stream, partial-rollout or sluice)", s));
}

core::Result<ModeVariant> parse_mode_variant(const std::string& label) {
  if (label == "sluice") return ModeVariant{"sluice", true, "continuous", "continue"};
  if (label == "sluice-norepack") return ModeVariant{"sluice", false, "continuous", "continue"};
  if (label == "sluice-budget") return ModeVariant{"sluice", true, "budget", "drain"};
  if (label == "partial-rollout") return ModeVariant{"partial-rollout", true, "budget", ""};
  if (label == "partial-continuous") {
    return ModeVariant{"partial-rollout", true, "continuous", ""};
  }
  if (parse_mode(label).is_ok()) return ModeVariant{label, true, "", ""};
  return core::invalid_argument(
      fmt::format("unknown mode '{}' (sync, one-step-off, stream, partial-rollout, sluice, {})",
                  label, kModeVariants));
}

bool global_update(Mode m) {
  return m == Mode::kOneStepOff || m == Mode::kStream;
}

std::uint64_t batches_ahead(Mode m, std::uint32_t ahead_batches) {
  if (m == Mode::kSync) return 1;
  if (m == Mode::kOneStepOff) return 2;
  return ahead_batches;
}

bool collect_opens_budget(Mode m) {
  return m != Mode::kSync && m != Mode::kOneStepOff;
}

const char* out_of_work_state(Mode m) {
  return (m == Mode::kSync || m == Mode::kOneStepOff) ? "barrier" : "idle";
}

bool repacks(Mode m) {
  return m == Mode::kSluice;
}

core::Result<Admission> parse_admission(const std::string& s, Mode m) {
  // The mode's default: continuous in sluice mode (a free slot never waits for a budget), budget
  // in the others (as their users run them).
  if (s.empty()) return m == Mode::kSluice ? Admission::kContinuous : Admission::kBudget;
  if (s == "budget") return Admission::kBudget;
  if (s == "continuous") {
    if (m == Mode::kSync || m == Mode::kOneStepOff) {
      return core::invalid_argument(
          "admission 'continuous' is not possible in sync or one-step-off mode (they release one "
          "batch per version)");
    }
    return Admission::kContinuous;
  }
  return core::invalid_argument(fmt::format(
      "unknown admission '{}' (budget or continuous; empty for the mode's default)", s));
}

core::Result<TailPolicy> parse_tail(const std::string& s) {
  if (s.empty() || s == "continue") return TailPolicy::kContinue;
  if (s == "drain") return TailPolicy::kDrain;
  if (s == "continue") return TailPolicy::kContinue;
  if (s == "auto") return TailPolicy::kAuto;
  return core::invalid_argument(fmt::format("unknown tail '{}' (drain, continue or auto)", s));
}

bool takes_work(Mode m, const RolloutVersions& r, std::uint64_t latest,
                std::uint32_t max_assign_lag) {
  return r.version == latest || (m == Mode::kSluice && r.version > 0 && r.staged < latest &&
                                 latest - r.version <= max_assign_lag);
}

LoadDecision decide_load(Mode m, const RolloutVersions& r, std::uint64_t latest, bool has_work,
                         bool others_behind_with_work, std::uint32_t max_assign_lag,
                         bool continue_tail) {
  LoadDecision d;
  if (latest == 0 || r.version >= latest || r.loading) return d;
  if (m == Mode::kPartialRollout) {
    // Everyone loads at once; in-flight trajectories continue on the new version.
    d.load = latest;
    d.allow_active = true;
  } else if (global_update(m)) {
    if (!others_behind_with_work) {
      d.load = latest;
    } else if (!has_work) {
      d.barrier = true;
    }
  } else if (m == Mode::kSluice && has_work && continue_tail && r.staged >= latest) {
    // Its tail continues on the newest version, which it already holds (no stall for a pull).
    d.load = latest;
    d.allow_active = true;
  } else if (!has_work && (m != Mode::kSluice || r.staged >= latest)) {
    d.load = latest;
  } else if (!has_work && r.staged > r.version && latest - r.staged <= max_assign_lag) {
    // Sluice mode, drained while the newest version is still on its way: the newer version it
    // already holds lets it take work now (as a rollout that is still pulling may) rather than
    // idle until the newest one arrives.
    d.load = r.staged;
  }
  return d;
}

bool hands_back_queued(Mode m, const RolloutVersions& r, std::uint64_t latest, bool has_queued) {
  return m == Mode::kSluice && latest > r.version && r.staged >= latest && has_queued;
}

}  // namespace sluice::rollout
