#include "actor/publish_dtype.hpp"

#include <fmt/format.h>

#include <cstring>
#include <span>

#include "core/device_copy.hpp"
#include "format/bf16.hpp"

namespace sluice::actor {

core::Status check_publish_dtype(const std::string& dtype) {
  if (dtype == "f32" || dtype == "bf16") return {};
  return core::invalid_argument(fmt::format("publish_dtype must be f32 or bf16, not '{}'", dtype));
}

core::Result<std::vector<TensorView>> tensors_to_publish(const std::vector<TensorView>& tensors,
                                                         const std::string& dtype,
                                                         std::vector<std::uint8_t>& storage) {
  SLUICE_TRY(check_publish_dtype(dtype));
  if (dtype == "f32") return tensors;
  std::uint64_t total = 0;
  for (const auto& t : tensors) {
    std::uint64_t elements = 1;
    for (auto d : t.shape)
      elements *= d;
    if (t.dtype != "F32" || t.bytes != 4 * elements) {
      return core::invalid_argument(
          fmt::format("publish_dtype bf16: tensor {} is {} of {} bytes; only F32 tensors of "
                      "4 bytes an element are rounded",
                      t.name, t.dtype, t.bytes));
    }
    if (core::device_pointer(t.data).device) {
      return core::failed_precondition(fmt::format(
          "publish_dtype bf16: tensor {} is in device memory; rounding runs on the host", t.name));
    }
    total += t.bytes / 2;
  }
  storage.resize(total);
  std::vector<TensorView> out;
  out.reserve(tensors.size());
  std::uint64_t at = 0;
  for (const auto& t : tensors) {
    const std::uint64_t n = t.bytes / 4;
    // The tensor's bytes need not be aligned for float: copy through an aligned scratch when not.
    std::span<std::uint8_t> dst(storage.data() + at, 2 * n);
    if (reinterpret_cast<std::uintptr_t>(t.data) % alignof(float) == 0) {
      SLUICE_TRY(core::round_to_bf16({reinterpret_cast<const float*>(t.data), n}, dst));
    } else {
      std::vector<float> scratch(n);
      std::memcpy(scratch.data(), t.data, t.bytes);
      SLUICE_TRY(core::round_to_bf16(scratch, dst));
    }
    out.push_back({t.name, "BF16", t.shape, dst.data(), 2 * n});
    at += 2 * n;
  }
  return out;
}

}  // namespace sluice::actor
