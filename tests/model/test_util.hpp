// Helpers shared by the model tests.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/gpt.hpp"
#include "model/sampling.hpp"

namespace sluice::model::testing {

inline GptConfig tiny_config(bool value_head = false) {
  GptConfig c;
  c.vocab = 11;
  c.context = 12;
  c.d_model = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_ff = 24;
  c.value_head = value_head;
  c.init_seed = 7;
  return c;
}

inline std::unique_ptr<Gpt> make_model(const GptConfig& c) {
  auto r = Gpt::create(c);
  return r.is_ok() ? std::move(r).value() : nullptr;
}

inline std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint64_t& rng) {
  std::vector<std::int32_t> t(n);
  for (auto& x : t)
    x = static_cast<std::int32_t>(next_random(rng) % static_cast<std::uint64_t>(vocab));
  return t;
}

}  // namespace sluice::model::testing
