// DeviceLayout: the bookkeeping of device_copy.hpp that needs no CUDA (built in every
// configuration).
#include <algorithm>
#include <string>

#include "core/device_copy.hpp"

namespace sluice::core {

Result<DeviceLayout> DeviceLayout::make(std::vector<DeviceSpan> spans, std::uint64_t host_bytes) {
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const auto& s = spans[i];
    if (!s.data || s.bytes == 0)
      return invalid_argument("device layout: span " + std::to_string(i) + " is empty");
    if (s.offset > host_bytes || s.bytes > host_bytes - s.offset) {
      return invalid_argument("device layout: span " + std::to_string(i) + " (offset " +
                              std::to_string(s.offset) + ", " + std::to_string(s.bytes) +
                              " bytes) lies outside the image of " + std::to_string(host_bytes) +
                              " bytes");
    }
  }
  std::sort(spans.begin(), spans.end(),
            [](const DeviceSpan& a, const DeviceSpan& b) { return a.offset < b.offset; });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i - 1].offset + spans[i - 1].bytes > spans[i].offset) {
      return invalid_argument("device layout: spans at offsets " +
                              std::to_string(spans[i - 1].offset) + " and " +
                              std::to_string(spans[i].offset) + " overlap");
    }
  }
  DeviceLayout l;
  l.spans_ = std::move(spans);
  l.host_bytes_ = host_bytes;
  return l;
}

void DeviceLayout::for_range(
    std::uint64_t offset, std::uint64_t bytes,
    const std::function<void(void*, std::uint64_t, std::uint64_t)>& f) const {
  if (bytes == 0 || offset >= host_bytes_) return;
  const std::uint64_t end = offset + std::min(bytes, host_bytes_ - offset);
  // The first span that ends after `offset`: spans are sorted and disjoint, so their ends are
  // sorted too.
  auto it = std::partition_point(spans_.begin(), spans_.end(), [offset](const DeviceSpan& s) {
    return s.offset + s.bytes <= offset;
  });
  for (; it != spans_.end() && it->offset < end; ++it) {
    const std::uint64_t from = std::max(offset, it->offset);
    const std::uint64_t to = std::min(end, it->offset + it->bytes);
    f(static_cast<std::uint8_t*>(it->data) + (from - it->offset), from, to - from);
  }
}

std::optional<void*> DeviceLayout::contiguous_base() const {
  if (spans_.empty()) return std::nullopt;
  auto* base = static_cast<std::uint8_t*>(spans_.front().data) - spans_.front().offset;
  std::uint64_t next = 0;
  for (const auto& s : spans_) {
    if (s.offset != next || static_cast<std::uint8_t*>(s.data) != base + s.offset)
      return std::nullopt;
    next = s.offset + s.bytes;
  }
  if (next != host_bytes_) return std::nullopt;
  return base;
}

}  // namespace sluice::core
