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

// A tiny model's weights pushed well away from the GPT-2 initialisation (every path carries
// signal, and greedy choices are not near-ties that rounding could flip), and a batch of three
// random sequences with random per-token loss weights (for the log-probs and the values).
struct WeightedBatch {
  std::vector<std::vector<std::int32_t>> seqs;
  std::vector<std::vector<float>> wl;  // per predicted token
  std::vector<std::vector<float>> wv;  // per position
};

inline WeightedBatch perturb_and_batch(Gpt& m, int vocab, std::uint64_t& rng) {
  float* p = m.mutable_params();
  for (std::size_t i = 0; i < m.param_count(); ++i)
    p[i] += static_cast<float>(next_uniform(rng) - 0.5) * 0.3f;
  WeightedBatch b;
  b.seqs = {random_tokens(5, vocab, rng), random_tokens(12, vocab, rng),
            random_tokens(8, vocab, rng)};
  b.wl.resize(b.seqs.size());
  b.wv.resize(b.seqs.size());
  for (std::size_t i = 0; i < b.seqs.size(); ++i) {
    for (std::size_t t = 0; t + 1 < b.seqs[i].size(); ++t)
      b.wl[i].push_back(static_cast<float>(next_uniform(rng) * 2.0 - 1.0));
    for (std::size_t t = 0; t < b.seqs[i].size(); ++t)
      b.wv[i].push_back(static_cast<float>(next_uniform(rng) * 2.0 - 1.0));
  }
  return b;
}

}  // namespace sluice::model::testing
