// libFuzzer target: a trajectory and a sequence state (JSON), as a rollout reports them and the
// manager hands them to the actor or to another rollout. Whatever decodes re-encodes to JSON
// that decodes to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/json_limits.hpp"
#include "rl/trajectory.hpp"
#include "rollout/engine.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = sluice::core::parse_json_bounded(text, sluice::core::JsonLimits{});
  if (!j.is_ok()) return 0;
  if (auto t = sluice::rl::Trajectory::from_json(*j); t.is_ok()) {
    auto again = sluice::rl::Trajectory::from_json(t->to_json());
    if (!again.is_ok() || again->to_json() != t->to_json()) std::abort();
  }
  if (auto s = sluice::rollout::SequenceState::from_json(*j); s.is_ok()) {
    auto again = sluice::rollout::SequenceState::from_json(s->to_json());
    if (!again.is_ok() || again->to_json() != s->to_json()) std::abort();
  }
  return 0;
}
