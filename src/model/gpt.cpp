// The reference model: configuration, parameter layout, initialisation, and the training forward
// and backward passes. Inference with the KV cache is in gpt_infer.cpp.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "model/gpt_internal.hpp"
#include "model/kernels.hpp"
#include "model/sampling.hpp"

namespace sluice::model {

using core::invalid_argument;
namespace k = kernels;

core::Status GptConfig::validate() const {
  auto bad = [](const std::string& what) { return invalid_argument("model config: " + what); };
  if (vocab < 2 || vocab > (1 << 20)) return bad("vocab must be in [2, 1048576]");
  if (context < 1 || context > (1 << 16)) return bad("context must be in [1, 65536]");
  if (d_model < 1 || d_model > (1 << 14)) return bad("d_model must be in [1, 16384]");
  if (n_layer < 1 || n_layer > 256) return bad("n_layer must be in [1, 256]");
  if (n_head < 1 || n_head > d_model) return bad("n_head must be in [1, d_model]");
  if (d_model % n_head != 0) {
    return bad("d_model " + std::to_string(d_model) + " is not a multiple of n_head " +
               std::to_string(n_head));
  }
  if (d_ff < 1 || d_ff > (1 << 16)) return bad("d_ff must be in [1, 65536]");
  return {};
}

// ---- layout ----

GptLayout::GptLayout(const GptConfig& c) {
  const std::uint64_t V = static_cast<std::uint64_t>(c.vocab);
  const std::uint64_t T = static_cast<std::uint64_t>(c.context);
  const std::uint64_t C = static_cast<std::uint64_t>(c.d_model);
  const std::uint64_t F = static_cast<std::uint64_t>(c.d_ff);
  wte = add("wte", {V, C});
  wpe = add("wpe", {T, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    Block b{};
    b.ln1_w = add(p + "ln_1.weight", {C});
    b.ln1_b = add(p + "ln_1.bias", {C});
    b.qkv_w = add(p + "attn.c_attn.weight", {3 * C, C});
    b.qkv_b = add(p + "attn.c_attn.bias", {3 * C});
    b.proj_w = add(p + "attn.c_proj.weight", {C, C});
    b.proj_b = add(p + "attn.c_proj.bias", {C});
    b.ln2_w = add(p + "ln_2.weight", {C});
    b.ln2_b = add(p + "ln_2.bias", {C});
    b.fc_w = add(p + "mlp.c_fc.weight", {F, C});
    b.fc_b = add(p + "mlp.c_fc.bias", {F});
    b.fcproj_w = add(p + "mlp.c_proj.weight", {C, F});
    b.fcproj_b = add(p + "mlp.c_proj.bias", {C});
    blocks.push_back(b);
  }
  lnf_w = add("ln_f.weight", {C});
  lnf_b = add("ln_f.bias", {C});
  if (c.value_head) {
    value_w = add("value_head.weight", {1, C});
    value_b = add("value_head.bias", {1});
  }
}

std::size_t GptLayout::add(std::string name, std::vector<std::uint64_t> shape) {
  std::uint64_t count = 1;
  for (auto d : shape)
    count *= d;
  const std::size_t offset = total;
  specs.push_back(core::TensorSpec{std::move(name), "F32", std::move(shape), offset * sizeof(float),
                                   count * sizeof(float)});
  total += count;
  return offset;
}

// ---- construction ----

Gpt::Gpt(const GptConfig& config)
    : config_(config),
      layout_(std::make_unique<Layout>(config)),
      params_(layout_->total, 0.0f),
      grads_(layout_->total, 0.0f),
      acts_(std::make_unique<Activations>()),
      infer_(std::make_unique<InferScratch>()) {}

Gpt::~Gpt() = default;

core::Result<std::unique_ptr<Gpt>> Gpt::create(const GptConfig& config) {
  SLUICE_TRY(config.validate());
  std::unique_ptr<Gpt> g(new Gpt(config));
  g->init_weights();
  return g;
}

void Gpt::init_weights() {
  std::uint64_t rng = config_.init_seed;
  // Box-Muller from the same SplitMix64 generator the sampler uses: portable and reproducible.
  auto normal = [&rng](float stddev) {
    double u1 = next_uniform(rng);
    double u2 = next_uniform(rng);
    double r = std::sqrt(-2.0 * std::log(1.0 - u1));
    return static_cast<float>(stddev * r * std::cos(6.283185307179586 * u2));
  };
  auto fill_normal = [&](std::size_t off, std::size_t count, float stddev) {
    for (std::size_t i = 0; i < count; ++i)
      params_[off + i] = normal(stddev);
  };
  auto fill = [&](std::size_t off, std::size_t count, float value) {
    std::fill_n(params_.begin() + static_cast<std::ptrdiff_t>(off), count, value);
  };
  const std::size_t V = static_cast<std::size_t>(config_.vocab);
  const std::size_t T = static_cast<std::size_t>(config_.context);
  const std::size_t C = static_cast<std::size_t>(config_.d_model);
  const std::size_t F = static_cast<std::size_t>(config_.d_ff);
  const float kStd = 0.02f;
  // GPT-2: residual-stream projections scaled so the stream's variance does not grow with depth.
  const float resid_std = kStd / std::sqrt(2.0f * static_cast<float>(config_.n_layer));
  const Layout& L = *layout_;
  fill_normal(L.wte, V * C, kStd);
  fill_normal(L.wpe, T * C, 0.01f);
  for (const auto& b : L.blocks) {
    fill(b.ln1_w, C, 1.0f);
    fill_normal(b.qkv_w, 3 * C * C, kStd);
    fill_normal(b.proj_w, C * C, resid_std);
    fill(b.ln2_w, C, 1.0f);
    fill_normal(b.fc_w, F * C, kStd);
    fill_normal(b.fcproj_w, C * F, resid_std);
  }
  fill(L.lnf_w, C, 1.0f);
  if (config_.value_head) fill_normal(L.value_w, C, kStd);
}

std::vector<core::TensorSpec> Gpt::tensors() const {
  return layout_->specs;
}

core::Status Gpt::load(const std::uint8_t* data, std::size_t bytes) {
  if (bytes != param_bytes()) {
    return invalid_argument("model load: got " + std::to_string(bytes) + " bytes, the model has " +
                            std::to_string(param_bytes()));
  }
  if (data == nullptr) return invalid_argument("model load: null data");
  std::memcpy(params_.data(), data, bytes);
  return {};
}

void Gpt::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
}

core::Status Gpt::check_tokens(std::span<const std::int32_t> tokens, const char* what) const {
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= config_.vocab) {
      return invalid_argument(std::string(what) + ": token " + std::to_string(tokens[t]) +
                              " at position " + std::to_string(t) + " is outside [0, " +
                              std::to_string(config_.vocab) + ")");
    }
  }
  return {};
}

// ---- training forward ----

namespace {

template <typename T>
void grow(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

// Head h's first column in a [t, 3C] row of q | k | v, each head hs wide.
struct HeadCols {
  int q, k, v;
};
HeadCols head_cols(int h, int hs, int c) {
  return {h * hs, c + h * hs, 2 * c + h * hs};
}

// Causal self-attention over one sequence of t rows. qkv is [t, 3C] (q | k | v), att receives the
// per-head [t, t] probabilities, y [t, C] the heads' outputs side by side.
void attention_forward(float* att, float* y, const float* qkv, int t, int c, int n_head) {
  const int hs = c / n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int h = 0; h < n_head; ++h) {
    const HeadCols o = head_cols(h, hs, c);
    float* a = att + static_cast<std::size_t>(h) * t * t;
    k::sgemm(false, true, t, t, hs, scale, qkv + o.q, 3 * c, qkv + o.k, 3 * c, 0.0f, a, t);
    k::causal_softmax(a, t);
    k::sgemm(false, false, t, hs, t, 1.0f, a, t, qkv + o.v, 3 * c, 0.0f, y + h * hs, c);
  }
}

// Backward of attention_forward for one sequence: dqkv (+=) from dy, with datt as [t, t] scratch.
// dqkv has qkv's layout, so one head's columns are the same in both.
void attention_backward(float* dqkv, float* datt, const float* dy, const float* qkv,
                        const float* att, int t, int c, int n_head) {
  const int hs = c / n_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int h = 0; h < n_head; ++h) {
    const HeadCols o = head_cols(h, hs, c);
    const float* a = att + static_cast<std::size_t>(h) * t * t;
    const float* d = dy + h * hs;
    k::sgemm(false, true, t, t, hs, 1.0f, d, c, qkv + o.v, 3 * c, 0.0f, datt, t);  // dP = dy v^T
    k::sgemm(true, false, t, hs, t, 1.0f, a, t, d, c, 1.0f, dqkv + o.v, 3 * c);    // dv += P^T dy
    k::causal_softmax_backward(datt, a, t);                                        // dS
    k::sgemm(false, false, t, hs, t, scale, datt, t, qkv + o.k, 3 * c, 1.0f, dqkv + o.q, 3 * c);
    k::sgemm(true, false, t, hs, t, scale, datt, t, qkv + o.q, 3 * c, 1.0f, dqkv + o.k, 3 * c);
  }
}

}  // namespace

core::Result<ForwardOutput> Gpt::forward(const std::vector<std::vector<std::int32_t>>& seqs) {
  if (seqs.empty()) return invalid_argument("forward: empty batch");
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].empty() || seqs[i].size() > static_cast<std::size_t>(config_.context)) {
      return invalid_argument("forward: sequence " + std::to_string(i) + " has " +
                              std::to_string(seqs[i].size()) + " tokens, need 1.." +
                              std::to_string(config_.context));
    }
    SLUICE_TRY(check_tokens(seqs[i], "forward"));
  }
  Activations& a = *acts_;
  a.seqs = seqs;
  a.row0.assign(seqs.size(), 0);
  a.att0.assign(seqs.size(), 0);
  int n = 0;
  std::size_t att_total = 0;
  const int H = config_.n_head;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::size_t t = seqs[i].size();
    a.row0[i] = n;
    a.att0[i] = att_total;
    n += static_cast<int>(t);
    att_total += static_cast<std::size_t>(H) * t * t;
  }
  a.n = n;
  const int C = config_.d_model;
  const int F = config_.d_ff;
  const int V = config_.vocab;
  const std::size_t N = static_cast<std::size_t>(n);
  const float* P = params_.data();
  const Layout& L = *layout_;

  grow(a.encoded, N * C);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::size_t t = 0; t < seqs[i].size(); ++t) {
      float* e = a.encoded.data() + (a.row0[i] + t) * C;
      const float* te = P + L.wte + static_cast<std::size_t>(seqs[i][t]) * C;
      const float* pe = P + L.wpe + t * C;
      for (int j = 0; j < C; ++j)
        e[j] = te[j] + pe[j];
    }
  }

  a.blocks.resize(L.blocks.size());
  const float* x = a.encoded.data();
  for (std::size_t l = 0; l < L.blocks.size(); ++l) {
    Activations::Block& b = a.blocks[l];
    const Layout::Block& w = L.blocks[l];
    grow(b.ln1, N * C);
    grow(b.ln1_mean, N);
    grow(b.ln1_rstd, N);
    grow(b.qkv, N * 3 * C);
    grow(b.att, att_total);
    grow(b.atty, N * C);
    grow(b.resid2, N * C);
    grow(b.ln2, N * C);
    grow(b.ln2_mean, N);
    grow(b.ln2_rstd, N);
    grow(b.fch, N * F);
    grow(b.fch_gelu, N * F);
    grow(b.resid3, N * C);

    k::layernorm_forward(b.ln1.data(), b.ln1_mean.data(), b.ln1_rstd.data(), x, P + w.ln1_w,
                         P + w.ln1_b, n, C);
    k::matmul_forward(b.qkv.data(), b.ln1.data(), P + w.qkv_w, P + w.qkv_b, n, C, 3 * C);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const std::size_t r0 = static_cast<std::size_t>(a.row0[i]);
      attention_forward(b.att.data() + a.att0[i], b.atty.data() + r0 * C, b.qkv.data() + r0 * 3 * C,
                        static_cast<int>(seqs[i].size()), C, H);
    }
    k::matmul_forward(b.resid2.data(), b.atty.data(), P + w.proj_w, P + w.proj_b, n, C, C);
    for (std::size_t j = 0; j < N * C; ++j)
      b.resid2[j] += x[j];
    k::layernorm_forward(b.ln2.data(), b.ln2_mean.data(), b.ln2_rstd.data(), b.resid2.data(),
                         P + w.ln2_w, P + w.ln2_b, n, C);
    k::matmul_forward(b.fch.data(), b.ln2.data(), P + w.fc_w, P + w.fc_b, n, C, F);
    k::gelu_forward(b.fch_gelu.data(), b.fch.data(), N * F);
    k::matmul_forward(b.resid3.data(), b.fch_gelu.data(), P + w.fcproj_w, P + w.fcproj_b, n, F, C);
    for (std::size_t j = 0; j < N * C; ++j)
      b.resid3[j] += b.resid2[j];
    x = b.resid3.data();
  }

  grow(a.lnf, N * C);
  grow(a.lnf_mean, N);
  grow(a.lnf_rstd, N);
  grow(a.logits, N * V);
  grow(a.lse, N);
  k::layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, P + L.lnf_w,
                       P + L.lnf_b, n, C);
  k::matmul_forward(a.logits.data(), a.lnf.data(), P + L.wte, nullptr, n, C, V);
  for (std::size_t r = 0; r < N; ++r)
    a.lse[r] = k::log_sum_exp(a.logits.data() + r * V, V);

  ForwardOutput out;
  out.logprobs.resize(seqs.size());
  if (config_.value_head) out.values.resize(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::size_t len = seqs[i].size();
    const std::size_t r0 = static_cast<std::size_t>(a.row0[i]);
    out.logprobs[i].resize(len - 1);
    for (std::size_t t = 1; t < len; ++t) {
      const std::size_t r = r0 + t - 1;
      out.logprobs[i][t - 1] = a.logits[r * V + static_cast<std::size_t>(seqs[i][t])] - a.lse[r];
    }
    if (config_.value_head) {
      out.values[i].resize(len);
      const float* vw = P + L.value_w;
      for (std::size_t t = 0; t < len; ++t) {
        const float* h = a.lnf.data() + (r0 + t) * C;
        float v = P[L.value_b];
        for (int j = 0; j < C; ++j)
          v += h[j] * vw[j];
        out.values[i][t] = v;
      }
    }
  }
  return out;
}

// ---- training backward ----

core::Status Gpt::backward(const std::vector<std::vector<float>>& dlogprob,
                           const std::vector<std::vector<float>>& dvalue) {
  Activations& a = *acts_;
  if (a.n == 0) return core::failed_precondition("backward: no forward pass to go back through");
  const auto& seqs = a.seqs;
  if (dlogprob.size() != seqs.size()) {
    return invalid_argument("backward: dlogprob has " + std::to_string(dlogprob.size()) +
                            " sequences, the forward pass had " + std::to_string(seqs.size()));
  }
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (dlogprob[i].size() != seqs[i].size() - 1) {
      return invalid_argument("backward: dlogprob[" + std::to_string(i) + "] has " +
                              std::to_string(dlogprob[i].size()) + " values, expected " +
                              std::to_string(seqs[i].size() - 1));
    }
  }
  if (!dvalue.empty()) {
    if (!config_.value_head) return invalid_argument("backward: dvalue given, no value head");
    if (dvalue.size() != seqs.size()) {
      return invalid_argument("backward: dvalue has " + std::to_string(dvalue.size()) +
                              " sequences, the forward pass had " + std::to_string(seqs.size()));
    }
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      if (dvalue[i].size() != seqs[i].size()) {
        return invalid_argument("backward: dvalue[" + std::to_string(i) + "] has " +
                                std::to_string(dvalue[i].size()) + " values, expected " +
                                std::to_string(seqs[i].size()));
      }
    }
  }

  const int n = a.n;
  const std::size_t N = static_cast<std::size_t>(n);
  const int C = config_.d_model;
  const int F = config_.d_ff;
  const int V = config_.vocab;
  const int H = config_.n_head;
  const float* P = params_.data();
  float* G = grads_.data();
  const Layout& L = *layout_;

  // dL/dlogits = dL/dlogprob * (onehot(target) - softmax(logits)); the last position of each
  // sequence predicts nothing.
  grow(a.dlogits, N * V);
  std::fill_n(a.dlogits.begin(), N * V, 0.0f);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::size_t t = 1; t < seqs[i].size(); ++t) {
      const float g = dlogprob[i][t - 1];
      if (g == 0.0f) continue;
      const std::size_t r = static_cast<std::size_t>(a.row0[i]) + t - 1;
      const float* lg = a.logits.data() + r * V;
      float* d = a.dlogits.data() + r * V;
      for (int v = 0; v < V; ++v)
        d[v] = -g * std::exp(lg[v] - a.lse[r]);
      d[seqs[i][t]] += g;
    }
  }
  grow(a.dlnf, N * C);
  k::matmul_backward(a.dlnf.data(), G + L.wte, nullptr, a.dlogits.data(), a.lnf.data(), P + L.wte,
                     n, C, V);
  if (!dvalue.empty()) {
    const float* vw = P + L.value_w;
    float* dvw = G + L.value_w;
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      for (std::size_t t = 0; t < seqs[i].size(); ++t) {
        const float g = dvalue[i][t];
        const std::size_t r = static_cast<std::size_t>(a.row0[i]) + t;
        const float* h = a.lnf.data() + r * C;
        float* dh = a.dlnf.data() + r * C;
        for (int j = 0; j < C; ++j) {
          dh[j] += g * vw[j];
          dvw[j] += g * h[j];
        }
        G[L.value_b] += g;
      }
    }
  }

  grow(a.dresid, N * C);
  std::fill_n(a.dresid.begin(), N * C, 0.0f);
  const float* x_last = a.blocks.back().resid3.data();
  k::layernorm_backward(a.dresid.data(), G + L.lnf_w, G + L.lnf_b, a.dlnf.data(), x_last,
                        P + L.lnf_w, a.lnf_mean.data(), a.lnf_rstd.data(), n, C);

  grow(a.dfch, N * F);
  grow(a.dfch_gelu, N * F);
  grow(a.dln, N * C);
  grow(a.datty, N * C);
  grow(a.dqkv, N * 3 * C);
  std::size_t max_t = 0;
  for (const auto& s : seqs)
    max_t = std::max(max_t, s.size());
  grow(a.datt, max_t * max_t);
  float* dresid = a.dresid.data();
  for (std::size_t l = L.blocks.size(); l-- > 0;) {
    const Activations::Block& b = a.blocks[l];
    const Layout::Block& w = L.blocks[l];
    const float* x_in = l == 0 ? a.encoded.data() : a.blocks[l - 1].resid3.data();
    // MLP: resid3 = resid2 + fcproj(gelu(fc(ln2(resid2)))).
    k::matmul_backward(a.dfch_gelu.data(), G + w.fcproj_w, G + w.fcproj_b, dresid,
                       b.fch_gelu.data(), P + w.fcproj_w, n, F, C);
    k::gelu_backward(a.dfch.data(), b.fch.data(), a.dfch_gelu.data(), N * F);
    k::matmul_backward(a.dln.data(), G + w.fc_w, G + w.fc_b, a.dfch.data(), b.ln2.data(),
                       P + w.fc_w, n, C, F);
    k::layernorm_backward(dresid, G + w.ln2_w, G + w.ln2_b, a.dln.data(), b.resid2.data(),
                          P + w.ln2_w, b.ln2_mean.data(), b.ln2_rstd.data(), n, C);
    // Attention: resid2 = x_in + proj(attention(qkv(ln1(x_in)))).
    k::matmul_backward(a.datty.data(), G + w.proj_w, G + w.proj_b, dresid, b.atty.data(),
                       P + w.proj_w, n, C, C);
    std::fill_n(a.dqkv.begin(), N * 3 * C, 0.0f);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const std::size_t r0 = static_cast<std::size_t>(a.row0[i]);
      attention_backward(a.dqkv.data() + r0 * 3 * C, a.datt.data(), a.datty.data() + r0 * C,
                         b.qkv.data() + r0 * 3 * C, b.att.data() + a.att0[i],
                         static_cast<int>(seqs[i].size()), C, H);
    }
    k::matmul_backward(a.dln.data(), G + w.qkv_w, G + w.qkv_b, a.dqkv.data(), b.ln1.data(),
                       P + w.qkv_w, n, C, 3 * C);
    k::layernorm_backward(dresid, G + w.ln1_w, G + w.ln1_b, a.dln.data(), x_in, P + w.ln1_w,
                          b.ln1_mean.data(), b.ln1_rstd.data(), n, C);
  }

  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::size_t t = 0; t < seqs[i].size(); ++t) {
      const float* d = dresid + (static_cast<std::size_t>(a.row0[i]) + t) * C;
      float* dte = G + L.wte + static_cast<std::size_t>(seqs[i][t]) * C;
      float* dpe = G + L.wpe + t * C;
      for (int j = 0; j < C; ++j) {
        dte[j] += d[j];
        dpe[j] += d[j];
      }
    }
  }
  return {};
}

core::Result<float> Gpt::sft_loss_and_grad(const std::vector<std::vector<std::int32_t>>& seqs,
                                           const std::vector<std::int32_t>& response_start,
                                           const std::vector<std::vector<std::uint8_t>>& masks) {
  if (response_start.size() != seqs.size() || (!masks.empty() && masks.size() != seqs.size())) {
    return invalid_argument("sft: " + std::to_string(response_start.size()) +
                            " response starts and " + std::to_string(masks.size()) + " masks for " +
                            std::to_string(seqs.size()) + " sequences");
  }
  // Whether response token t of sequence i is trained on.
  auto trained = [&](std::size_t i, std::size_t t) {
    return masks.empty() || masks[i].empty() ||
           masks[i][t - static_cast<std::size_t>(response_start[i])] != 0;
  };
  std::size_t count = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto s = response_start[i];
    if (s < 1 || static_cast<std::size_t>(s) >= seqs[i].size()) {
      return invalid_argument("sft: response start " + std::to_string(s) + " of sequence " +
                              std::to_string(i) + " is outside [1, " +
                              std::to_string(seqs[i].size()) + ")");
    }
    if (!masks.empty() && !masks[i].empty() &&
        masks[i].size() != seqs[i].size() - static_cast<std::size_t>(s)) {
      return invalid_argument("sft: the mask of sequence " + std::to_string(i) + " has " +
                              std::to_string(masks[i].size()) + " entries for " +
                              std::to_string(seqs[i].size() - static_cast<std::size_t>(s)) +
                              " response tokens");
    }
    for (std::size_t t = static_cast<std::size_t>(s); t < seqs[i].size(); ++t)
      count += trained(i, t) ? 1 : 0;
  }
  if (count == 0) return invalid_argument("sft: no response token is trained on");
  SLUICE_ASSIGN_OR_RETURN(ForwardOutput out, forward(seqs));
  const float scale = 1.0f / static_cast<float>(count);
  double loss = 0.0;
  std::vector<std::vector<float>> dlogprob(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    dlogprob[i].assign(seqs[i].size() - 1, 0.0f);
    for (std::size_t t = static_cast<std::size_t>(response_start[i]); t < seqs[i].size(); ++t) {
      if (!trained(i, t)) continue;
      loss -= out.logprobs[i][t - 1];
      dlogprob[i][t - 1] = -scale;
    }
  }
  SLUICE_TRY(backward(dlogprob, {}));
  return static_cast<float>(loss / static_cast<double>(count));
}

}  // namespace sluice::model
