// Internal to sluice_model: the parameter layout and the buffers Gpt (model/gpt.hpp) keeps between
// calls.
//
// Thread safety: owned by one Gpt, used as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "format/tensor_spec.hpp"
#include "model/gpt_types.hpp"

namespace sluice::model {

// Offsets, in floats, of every tensor in the parameter (and gradient) buffer.
struct GptLayout {
  struct Block {
    std::size_t ln1_w, ln1_b;        // [C], [C]
    std::size_t qkv_w, qkv_b;        // [3C, C], [3C]  (q, k, v stacked)
    std::size_t proj_w, proj_b;      // [C, C], [C]
    std::size_t ln2_w, ln2_b;        // [C], [C]
    std::size_t fc_w, fc_b;          // [F, C], [F]
    std::size_t fcproj_w, fcproj_b;  // [C, F], [C]
  };
  std::size_t wte = 0;  // [V, C], also the output head (tied)
  std::size_t wpe = 0;  // [T, C]
  std::vector<Block> blocks;
  std::size_t lnf_w = 0, lnf_b = 0;
  std::size_t value_w = 0, value_b = 0;  // [1, C], [1] when config.value_head
  std::size_t total = 0;
  std::vector<core::TensorSpec> specs;  // in offset order

  explicit GptLayout(const GptConfig& c);

 private:
  std::size_t add(std::string name, std::vector<std::uint64_t> shape);
};

// What forward() keeps for backward(), for the batch it last ran. Rows are all positions of all
// sequences stacked: sequence i occupies rows [row0[i], row0[i] + len[i]).
struct GptActivations {
  struct Block {
    std::vector<float> ln1, ln1_mean, ln1_rstd;  // [N, C], [N], [N]
    std::vector<float> qkv;                      // [N, 3C]
    std::vector<float> att;                      // per sequence, per head: [T_i, T_i] probabilities
    std::vector<float> atty;                     // [N, C] attention output before projection
    std::vector<float> resid2;                   // [N, C] residual after attention
    std::vector<float> ln2, ln2_mean, ln2_rstd;  // [N, C], [N], [N]
    std::vector<float> fch, fch_gelu;            // [N, F], [N, F]
    std::vector<float> resid3;                   // [N, C] block output
  };
  std::vector<std::vector<std::int32_t>> seqs;
  std::vector<int> row0;
  std::vector<std::size_t> att0;  // offset of sequence i's attention maps in Block::att
  int n = 0;                      // rows
  std::vector<float> encoded;     // [N, C] embeddings, the input of block 0
  std::vector<Block> blocks;
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // [N, C], [N], [N]
  std::vector<float> logits;                   // [N, V]
  std::vector<float> lse;                      // [N] log-sum-exp of each logits row
  // Backward scratch.
  std::vector<float> dlogits, dlnf, dresid, dfch, dfch_gelu, dln, datty, dqkv, datt;
};

// Scratch for prefill/decode; grows to the largest row count seen, never shrinks.
struct GptInferScratch {
  std::vector<float> x, ln, qkv, y, tmp, h, hg, scores;
  std::vector<KvCache*> cache;
  std::vector<std::int32_t> pos;
  std::vector<int> out_rows;
  std::vector<float> lnf;
};

}  // namespace sluice::model
