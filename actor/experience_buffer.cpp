#include "actor/experience_buffer.hpp"

#include <algorithm>
#include <utility>

namespace sluice::actor {

std::uint64_t behaviour_version(const rl::Trajectory& t) {
  std::uint64_t v = t.version;
  for (auto x : t.versions)
    v = std::min(v, x);
  return v;
}

namespace {

std::uint64_t staleness_of(const rl::Trajectory& t, std::uint64_t actor_version) {
  const std::uint64_t b = behaviour_version(t);
  return actor_version > b ? actor_version - b : 0;
}

bool any_abandoned(const std::vector<rl::Trajectory>& g) {
  return std::any_of(g.begin(), g.end(), [](const rl::Trajectory& t) { return t.abandoned; });
}

std::uint64_t group_staleness(const std::vector<rl::Trajectory>& g, std::uint64_t actor_version) {
  std::uint64_t s = 0;
  for (const auto& t : g)
    s = std::max(s, staleness_of(t, actor_version));
  return s;
}

}  // namespace

void count_staleness(StalenessCounts& counts, std::uint64_t staleness) {
  if (counts.size() <= staleness) counts.resize(staleness + 1);
  ++counts[staleness];
}

std::uint64_t staleness_quantile(const StalenessCounts& counts, double q) {
  std::uint64_t total = 0;
  for (auto c : counts)
    total += c;
  if (total == 0) return 0;
  const double want = q * static_cast<double>(total);
  std::uint64_t seen = 0;
  for (std::size_t s = 0; s < counts.size(); ++s) {
    seen += counts[s];
    if (static_cast<double>(seen) >= want) return s;
  }
  return counts.size() - 1;
}

ExperienceBuffer::ExperienceBuffer(BufferOptions options)
    : options_(options), seen_(options.group_size) {
  // A group of 0 makes no sense; it means ungrouped, like 1.
  if (options_.group_size == 0) options_.group_size = 1;
}

core::Status ExperienceBuffer::add(rl::Trajectory t) {
  if (t.id.empty()) return core::invalid_argument("experience buffer: trajectory without an id");
  if (!seen_.insert(t.id)) {
    ++counts_.duplicates;
    return core::Status(core::Code::kAlreadyExists,
                        "experience buffer: trajectory " + t.id + " was already accepted");
  }
  ++counts_.accepted;
  counts_.accepted_tokens += t.response_tokens.size();
  if (t.abandoned) ++counts_.abandoned;
  if (options_.group_size == 1) {
    std::vector<rl::Trajectory> g;
    g.push_back(std::move(t));
    ready_groups_.push_back(std::move(g));
    return {};
  }
  auto it = partial_groups_.try_emplace(t.prompt_id).first;
  it->second.push_back(std::move(t));
  if (it->second.size() >= options_.group_size) {
    ready_groups_.push_back(std::move(it->second));
    partial_groups_.erase(it);
  }
  return {};
}

std::vector<Sample> ExperienceBuffer::take(std::size_t n, std::uint64_t actor_version) {
  std::vector<Sample> out;
  {
    // Drop every stale group now, not only those in front: staleness only grows, so they would
    // be dropped later anyway, and ready() then counts only what can still be taken. A group
    // with an abandoned member goes under either policy: it is not a whole group of responses.
    const bool drop_stale = options_.policy == StalenessPolicy::kDrop;
    std::deque<std::vector<rl::Trajectory>> keep;
    for (auto& g : ready_groups_) {
      if (any_abandoned(g) ||
          (drop_stale && group_staleness(g, actor_version) > options_.max_staleness)) {
        counts_.dropped_stale += g.size();
        for (const auto& t : g) {
          dropped_ids_.push_back(t.id);
          counts_.dropped_tokens += t.response_tokens.size();
        }
      } else {
        keep.push_back(std::move(g));
      }
    }
    ready_groups_ = std::move(keep);
  }
  while (!ready_groups_.empty() && out.size() + ready_groups_.front().size() <= n) {
    auto g = std::move(ready_groups_.front());
    ready_groups_.pop_front();
    const bool stale = group_staleness(g, actor_version) > options_.max_staleness;
    if (stale) counts_.downweighted += g.size();  // only reached under kDownweight
    for (auto& t : g) {
      Sample s;
      s.staleness = staleness_of(t, actor_version);
      s.weight = stale ? options_.stale_weight : 1.0;
      s.trajectory = std::move(t);
      out.push_back(std::move(s));
    }
  }
  counts_.consumed += out.size();
  return out;
}

std::size_t ExperienceBuffer::ready() const {
  std::size_t n = 0;
  for (const auto& g : ready_groups_)
    n += g.size();
  return n;
}

std::vector<std::string> ExperienceBuffer::drain_dropped_ids() {
  return std::exchange(dropped_ids_, {});
}

BufferCounts ExperienceBuffer::counts_without_held() const {
  BufferCounts c = counts_;
  auto forget = [&](const std::vector<rl::Trajectory>& g) {
    for (const auto& t : g) {
      --c.accepted;
      c.accepted_tokens -= t.response_tokens.size();
      if (t.abandoned) --c.abandoned;
    }
  };
  for (const auto& g : ready_groups_)
    forget(g);
  for (const auto& [prompt, g] : partial_groups_)
    forget(g);
  return c;
}

std::size_t ExperienceBuffer::held() const {
  std::size_t n = ready();
  for (const auto& [prompt, g] : partial_groups_)
    n += g.size();
  return n;
}

}  // namespace sluice::actor
