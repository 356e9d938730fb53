#include "format/bf16.hpp"

#include <string>

namespace sluice::core {

Status round_to_bf16(std::span<const float> in, std::span<std::uint8_t> out) {
  if (out.size() != 2 * in.size()) {
    return invalid_argument("bf16: " + std::to_string(in.size()) + " fp32 values need " +
                            std::to_string(2 * in.size()) + " bytes, not " +
                            std::to_string(out.size()));
  }
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint16_t h = bf16_from_f32(in[i]);
    out[2 * i] = static_cast<std::uint8_t>(h);
    out[2 * i + 1] = static_cast<std::uint8_t>(h >> 8);
  }
  return {};
}

Status widen_bf16(std::span<const std::uint8_t> in, std::span<float> out) {
  if (in.size() != 2 * out.size()) {
    return invalid_argument("bf16: " + std::to_string(in.size()) + " bytes are not " +
                            std::to_string(out.size()) + " bf16 values");
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto h = static_cast<std::uint16_t>(in[2 * i] | (in[2 * i + 1] << 8));
    out[i] = f32_from_bf16(h);
  }
  return {};
}

}  // namespace sluice::core
