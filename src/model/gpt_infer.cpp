// Inference with a KV cache: prefill and batched decode for continuous batching. Every new token
// is a row; the linear layers run over all rows at once (sgemm), attention runs per row over its
// own sequence's cache.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/gpt.hpp"
#include "model/gpt_internal.hpp"
#include "model/kernels.hpp"

namespace sluice::model {

using core::invalid_argument;
namespace k = kernels;

namespace {
template <typename T>
void grow(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}
}  // namespace

KvCache Gpt::make_cache() const {
  KvCache c;
  c.n_layer_ = config_.n_layer;
  c.context_ = config_.context;
  c.d_model_ = config_.d_model;
  const std::size_t n = static_cast<std::size_t>(config_.n_layer) *
                        static_cast<std::size_t>(config_.context) *
                        static_cast<std::size_t>(config_.d_model);
  c.k_.assign(n, 0.0f);
  c.v_.assign(n, 0.0f);
  return c;
}

void KvCache::export_rows(std::vector<float>& keys, std::vector<float>& values) const {
  const std::size_t row = static_cast<std::size_t>(d_model_);
  const std::size_t used = static_cast<std::size_t>(length_) * row;
  const std::size_t layer = static_cast<std::size_t>(context_) * row;
  keys.resize(static_cast<std::size_t>(n_layer_) * used);
  values.resize(keys.size());
  for (std::size_t l = 0; l < static_cast<std::size_t>(n_layer_); ++l) {
    std::copy_n(k_.data() + l * layer, used, keys.data() + l * used);
    std::copy_n(v_.data() + l * layer, used, values.data() + l * used);
  }
}

core::Status KvCache::import_rows(std::int32_t layers, std::int32_t width, std::int32_t length,
                                  std::span<const float> keys, std::span<const float> values) {
  if (layers != n_layer_ || width != d_model_) {
    return invalid_argument("kv cache: rows of " + std::to_string(layers) + " layers x " +
                            std::to_string(width) + " do not fit a cache of " +
                            std::to_string(n_layer_) + " x " + std::to_string(d_model_));
  }
  if (length < 0 || length > context_) {
    return invalid_argument("kv cache: " + std::to_string(length) +
                            " positions do not fit a context of " + std::to_string(context_));
  }
  const std::size_t row = static_cast<std::size_t>(d_model_);
  const std::size_t used = static_cast<std::size_t>(length) * row;
  const std::size_t layer = static_cast<std::size_t>(context_) * row;
  const std::size_t want = static_cast<std::size_t>(n_layer_) * used;
  if (keys.size() != want || values.size() != want) {
    return invalid_argument("kv cache: expected " + std::to_string(want) +
                            " keys and values, got " + std::to_string(keys.size()) + " and " +
                            std::to_string(values.size()));
  }
  for (std::size_t l = 0; l < static_cast<std::size_t>(n_layer_); ++l) {
    std::copy_n(keys.data() + l * used, used, k_.data() + l * layer);
    std::copy_n(values.data() + l * used, used, v_.data() + l * layer);
  }
  length_ = length;
  return {};
}

void Gpt::run_rows(int n, const std::int32_t* tokens, KvCache* const* cache,
                   const std::int32_t* pos, const int* out_rows, int n_out, float* logits) {
  InferScratch& s = *infer_;
  const int C = config_.d_model;
  const int F = config_.d_ff;
  const int V = config_.vocab;
  const int T = config_.context;
  const int H = config_.n_head;
  const int hs = C / H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::size_t N = static_cast<std::size_t>(n);
  const float* P = params_.data();
  const Layout& L = *layout_;
  grow(s.x, N * C);
  grow(s.ln, N * C);
  grow(s.qkv, N * 3 * C);
  grow(s.y, N * C);
  grow(s.tmp, N * C);
  grow(s.h, N * F);
  grow(s.hg, N * F);
  grow(s.scores, static_cast<std::size_t>(T));
  grow(s.lnf, static_cast<std::size_t>(n_out) * C);

  for (std::size_t r = 0; r < N; ++r) {
    const float* te = P + L.wte + static_cast<std::size_t>(tokens[r]) * C;
    const float* pe = P + L.wpe + static_cast<std::size_t>(pos[r]) * C;
    float* x = s.x.data() + r * C;
    for (int j = 0; j < C; ++j)
      x[j] = te[j] + pe[j];
  }

  for (std::size_t l = 0; l < L.blocks.size(); ++l) {
    const Layout::Block& w = L.blocks[l];
    k::layernorm_forward(s.ln.data(), nullptr, nullptr, s.x.data(), P + w.ln1_w, P + w.ln1_b, n, C);
    k::matmul_forward(s.qkv.data(), s.ln.data(), P + w.qkv_w, P + w.qkv_b, n, C, 3 * C);
    // Store every new row's key and value first, so that rows of one sequence (a prefill) see
    // each other's.
    const std::size_t layer0 = l * static_cast<std::size_t>(T) * C;
    for (std::size_t r = 0; r < N; ++r) {
      const std::size_t at = layer0 + static_cast<std::size_t>(pos[r]) * C;
      const float* qkv = s.qkv.data() + r * 3 * C;
      std::copy_n(qkv + C, C, cache[r]->k_.data() + at);
      std::copy_n(qkv + 2 * C, C, cache[r]->v_.data() + at);
    }
    for (std::size_t r = 0; r < N; ++r) {
      const float* kc = cache[r]->k_.data() + layer0;
      const float* vc = cache[r]->v_.data() + layer0;
      const int span = pos[r] + 1;
      for (int h = 0; h < H; ++h) {
        const float* q = s.qkv.data() + r * 3 * C + h * hs;
        float* sc = s.scores.data();
        float mx = -INFINITY;
        for (int p = 0; p < span; ++p) {
          const float* key = kc + static_cast<std::size_t>(p) * C + h * hs;
          float dot = 0.0f;
          for (int j = 0; j < hs; ++j)
            dot += q[j] * key[j];
          sc[p] = dot * scale;
          mx = std::fmax(mx, sc[p]);
        }
        float sum = 0.0f;
        for (int p = 0; p < span; ++p) {
          sc[p] = std::exp(sc[p] - mx);
          sum += sc[p];
        }
        const float inv = 1.0f / sum;
        float* y = s.y.data() + r * C + h * hs;
        std::fill_n(y, hs, 0.0f);
        for (int p = 0; p < span; ++p) {
          const float* val = vc + static_cast<std::size_t>(p) * C + h * hs;
          const float wgt = sc[p] * inv;
          for (int j = 0; j < hs; ++j)
            y[j] += wgt * val[j];
        }
      }
    }
    k::matmul_forward(s.tmp.data(), s.y.data(), P + w.proj_w, P + w.proj_b, n, C, C);
    for (std::size_t j = 0; j < N * C; ++j)
      s.x[j] += s.tmp[j];
    k::layernorm_forward(s.ln.data(), nullptr, nullptr, s.x.data(), P + w.ln2_w, P + w.ln2_b, n, C);
    k::matmul_forward(s.h.data(), s.ln.data(), P + w.fc_w, P + w.fc_b, n, C, F);
    k::gelu_forward(s.hg.data(), s.h.data(), N * F);
    k::matmul_forward(s.tmp.data(), s.hg.data(), P + w.fcproj_w, P + w.fcproj_b, n, F, C);
    for (std::size_t j = 0; j < N * C; ++j)
      s.x[j] += s.tmp[j];
  }

  // Only the rows whose logits are wanted go through the final norm and the (tied) head.
  for (int o = 0; o < n_out; ++o) {
    k::layernorm_forward(s.lnf.data() + static_cast<std::size_t>(o) * C, nullptr, nullptr,
                         s.x.data() + static_cast<std::size_t>(out_rows[o]) * C, P + L.lnf_w,
                         P + L.lnf_b, 1, C);
  }
  k::matmul_forward(logits, s.lnf.data(), P + L.wte, nullptr, n_out, C, V);
}

core::Status Gpt::prefill(KvCache& cache, std::span<const std::int32_t> tokens,
                          std::vector<float>& logits) {
  if (cache.n_layer_ != config_.n_layer || cache.d_model_ != config_.d_model ||
      cache.context_ != config_.context) {
    return invalid_argument("prefill: the KV cache was not made by a model of this shape");
  }
  if (tokens.empty()) return invalid_argument("prefill: no tokens");
  if (tokens.size() > static_cast<std::size_t>(config_.context - cache.length_)) {
    return invalid_argument("prefill: " + std::to_string(tokens.size()) + " tokens after " +
                            std::to_string(cache.length_) + " cached exceed the context of " +
                            std::to_string(config_.context));
  }
  SLUICE_TRY(check_tokens(tokens, "prefill"));
  InferScratch& s = *infer_;
  const int n = static_cast<int>(tokens.size());
  s.cache.assign(tokens.size(), &cache);
  s.pos.resize(tokens.size());
  for (int r = 0; r < n; ++r)
    s.pos[static_cast<std::size_t>(r)] = cache.length_ + r;
  s.out_rows.assign(1, n - 1);
  logits.resize(static_cast<std::size_t>(config_.vocab));
  run_rows(n, tokens.data(), s.cache.data(), s.pos.data(), s.out_rows.data(), 1, logits.data());
  cache.length_ += n;
  return {};
}

core::Status Gpt::decode(std::span<KvCache* const> caches, std::span<const std::int32_t> tokens,
                         std::vector<float>& logits) {
  if (caches.empty()) return invalid_argument("decode: empty batch");
  if (caches.size() != tokens.size()) {
    return invalid_argument("decode: " + std::to_string(caches.size()) + " caches but " +
                            std::to_string(tokens.size()) + " tokens");
  }
  SLUICE_TRY(check_tokens(tokens, "decode"));
  for (std::size_t b = 0; b < caches.size(); ++b) {
    const KvCache* c = caches[b];
    if (c == nullptr) return invalid_argument("decode: cache " + std::to_string(b) + " is null");
    if (c->n_layer_ != config_.n_layer || c->d_model_ != config_.d_model ||
        c->context_ != config_.context) {
      return invalid_argument("decode: cache " + std::to_string(b) +
                              " was not made by a model of this shape");
    }
    if (c->length_ >= config_.context) {
      return invalid_argument("decode: sequence " + std::to_string(b) + " is full (" +
                              std::to_string(config_.context) + " tokens)");
    }
    // Two rows writing one cache would collide at the same position.
    for (std::size_t e = 0; e < b; ++e) {
      if (caches[e] == c) {
        return invalid_argument("decode: cache " + std::to_string(b) + " appears twice");
      }
    }
  }
  InferScratch& s = *infer_;
  const std::size_t B = caches.size();
  s.pos.resize(B);
  s.out_rows.resize(B);
  for (std::size_t b = 0; b < B; ++b) {
    s.pos[b] = caches[b]->length_;
    s.out_rows[b] = static_cast<int>(b);
  }
  logits.resize(B * static_cast<std::size_t>(config_.vocab));
  run_rows(static_cast<int>(B), tokens.data(), caches.data(), s.pos.data(), s.out_rows.data(),
           static_cast<int>(B), logits.data());
  for (KvCache* c : caches)
    ++c->length_;
  return {};
}

core::Status Gpt::logits_without_cache(std::span<const std::int32_t> tokens,
                                       std::vector<float>& logits) {
  std::vector<std::vector<std::int32_t>> batch(
      1, std::vector<std::int32_t>(tokens.begin(), tokens.end()));
  SLUICE_ASSIGN_OR_RETURN(ForwardOutput out, forward(batch));
  (void)out;
  const std::size_t V = static_cast<std::size_t>(config_.vocab);
  const std::size_t last = tokens.size() - 1;
  logits.assign(acts_->logits.begin() + static_cast<std::ptrdiff_t>(last * V),
                acts_->logits.begin() + static_cast<std::ptrdiff_t>((last + 1) * V));
  return {};
}

}  // namespace sluice::model
