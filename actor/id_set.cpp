#include "actor/id_set.hpp"

#include <algorithm>
#include <optional>

namespace sluice::actor {

namespace {

// A canonical decimal number (no sign, no leading zero but "0" itself, fits 64 bits): "p01/0"
// is another id than "p1/0", so it must not be read as the same pair.
std::optional<std::uint64_t> number(const std::string& s, std::size_t from, std::size_t to) {
  if (from >= to || to - from > 20) return std::nullopt;
  if (s[from] == '0' && to - from > 1) return std::nullopt;
  std::uint64_t n = 0;
  for (std::size_t i = from; i < to; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    const std::uint64_t d = static_cast<std::uint64_t>(s[i] - '0');
    if (n > (UINT64_MAX - d) / 10) return std::nullopt;
    n = n * 10 + d;
  }
  return n;
}

struct Parsed {
  std::uint64_t prompt;
  std::uint64_t sample;
};

// "p<prompt>/<sample>", both canonical; anything else is nullopt.
std::optional<Parsed> parse(const std::string& id) {
  if (id.size() < 4 || id[0] != 'p') return std::nullopt;
  const auto slash = id.find('/');
  if (slash == std::string::npos) return std::nullopt;
  auto p = number(id, 1, slash);
  auto k = number(id, slash + 1, id.size());
  if (!p || !k) return std::nullopt;
  return Parsed{*p, *k};
}

}  // namespace

IdSet::IdSet(std::uint32_t group_size) : group_size_(std::max<std::uint32_t>(1, group_size)) {}

bool IdSet::insert(const std::string& id) {
  auto ix = parse(id);
  if (!ix || ix->sample >= group_size_) {
    if (!other_.insert(id).second) return false;
    ++size_;
    return true;
  }
  if (ix->prompt < floor_) return false;
  auto& samples = above_[ix->prompt];
  if (samples.empty()) samples.assign(group_size_, false);
  if (samples[ix->sample]) return false;
  samples[ix->sample] = true;
  ++size_;
  advance();
  return true;
}

bool IdSet::contains(const std::string& id) const {
  auto ix = parse(id);
  if (!ix || ix->sample >= group_size_) return other_.count(id) > 0;
  if (ix->prompt < floor_) return true;
  auto it = above_.find(ix->prompt);
  return it != above_.end() && it->second[ix->sample];
}

void IdSet::advance() {
  // The floor moves past every prompt whose samples are all in: those need no entry.
  while (!above_.empty() && above_.begin()->first == floor_ &&
         std::all_of(above_.begin()->second.begin(), above_.begin()->second.end(),
                     [](bool b) { return b; })) {
    above_.erase(above_.begin());
    ++floor_;
  }
}

std::size_t IdSet::entries() const {
  std::size_t n = other_.size();
  for (const auto& [p, samples] : above_)
    n += static_cast<std::size_t>(std::count(samples.begin(), samples.end(), true));
  return n;
}

std::vector<std::string> IdSet::listed() const {
  std::vector<std::string> out;
  out.reserve(entries());
  for (const auto& [p, samples] : above_) {
    for (std::size_t k = 0; k < samples.size(); ++k) {
      if (samples[k]) out.push_back("p" + std::to_string(p) + "/" + std::to_string(k));
    }
  }
  out.insert(out.end(), other_.begin(), other_.end());
  return out;
}

core::Result<IdSet> IdSet::restore(std::uint32_t group_size, std::uint64_t floor,
                                   const std::vector<std::string>& listed) {
  IdSet s(group_size);
  s.floor_ = floor;
  // The floor stands for floor * group_size ids; saturate rather than wrap for absurd floors.
  s.size_ = floor > UINT64_MAX / s.group_size_ ? UINT64_MAX : floor * s.group_size_;
  for (const auto& id : listed) {
    auto ix = parse(id);
    if (ix && ix->sample < s.group_size_ && ix->prompt < floor) {
      return core::invalid_argument("id set: '" + id + "' is listed but below the floor " +
                                    std::to_string(floor));
    }
    s.insert(id);
  }
  return s;
}

}  // namespace sluice::actor
