// The reference model's configuration and its KV cache (model/gpt.hpp has the model): apart from
// the model so that its internals (model/gpt_internal.hpp) need not include it.
//
// Thread safety: plain values; a KvCache belongs to the caller and to one sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.hpp"

namespace sluice::model {

class Gpt;

struct GptConfig {
  std::int32_t vocab = 32;      // tokens 0..vocab-1; at least 2
  std::int32_t context = 96;    // maximum positions per sequence; at least 1
  std::int32_t d_model = 96;    // residual width; a multiple of n_head
  std::int32_t n_layer = 3;     // transformer blocks; at least 1
  std::int32_t n_head = 4;      // attention heads; divides d_model
  std::int32_t d_ff = 384;      // MLP hidden width; at least 1
  bool value_head = false;      // adds the scalar value head (PPO)
  std::uint64_t init_seed = 1;  // seeds the initial weights (the same seed, the same bytes)

  template <typename V>
  void describe(V& v) {
    v("vocab", vocab, "vocabulary size, at least 2 (default 32)");
    v("context", context, "maximum positions per sequence (default 96)");
    v("d_model", d_model, "residual width, a multiple of n_head (default 96)");
    v("n_layer", n_layer, "transformer blocks (default 3)");
    v("n_head", n_head, "attention heads (default 4)");
    v("d_ff", d_ff, "MLP hidden width (default 384)");
    v("value_head", value_head, "add a scalar value head for PPO (default false)");
    v("init_seed", init_seed, "seed of the initial weights (default 1)");
  }
  // Checks the constraints above, with limits that keep every size within int range.
  core::Status validate() const;
};

// Keys and values of one sequence, for every layer, for up to `context` positions. Made by
// Gpt::make_cache(); usable only with a model of the same shape (checked). Plain value: movable and
// copyable (a copy forks the sequence).
class KvCache {
 public:
  KvCache() = default;
  // Tokens cached so far (the next token goes at this position).
  std::int32_t length() const { return length_; }
  std::int32_t capacity() const { return context_; }
  // Forgets the sequence; keeps the memory.
  void clear() { length_ = 0; }
  // Memory held, for KV-footprint accounting.
  std::size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }
  std::int32_t layers() const { return n_layer_; }
  std::int32_t width() const { return d_model_; }
  // The keys and values of positions [0, length()), each as [layers][length][width]: what moves
  // with a sequence to another engine (bit for bit what this cache holds).
  void export_rows(std::vector<float>& keys, std::vector<float>& values) const;
  // Replaces what the cache holds with `length` positions exported from a cache of the same
  // model shape. kInvalidArgument (the cache unchanged) when the shape, the length or the sizes
  // do not match.
  core::Status import_rows(std::int32_t layers, std::int32_t width, std::int32_t length,
                           std::span<const float> keys, std::span<const float> values);

 private:
  friend class Gpt;
  std::int32_t n_layer_ = 0;
  std::int32_t context_ = 0;
  std::int32_t d_model_ = 0;
  std::int32_t length_ = 0;
  std::vector<float> k_;  // [n_layer][context][d_model]
  std::vector<float> v_;  // [n_layer][context][d_model]
};

}  // namespace sluice::model
