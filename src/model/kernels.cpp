#include "model/kernels.hpp"

#include "model/blas.hpp"
#include "model/cuda_gemm.hpp"
#include "model/device.hpp"

#include <cblas.h>

#include <cmath>

namespace sluice::model::kernels {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  // Empty products (nothing to compute, or C = beta C) stay on the CPU whatever the device: the
  // same result without a round trip, and no reliance on cuBLAS's k = 0 semantics.
  if (m > 0 && n > 0 && k > 0 && current_device() == Device::kCuda) {
    detail::host_sgemm_on_cuda(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int n, int ic,
                    int oc) {
  if (bias != nullptr) {
    for (int r = 0; r < n; ++r) {
      float* o = out + static_cast<std::size_t>(r) * oc;
      for (int j = 0; j < oc; ++j)
        o[j] = bias[j];
    }
  }
  sgemm(false, true, n, oc, ic, 1.0f, inp, ic, w, ic, bias != nullptr ? 1.0f : 0.0f, out, oc);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int n, int ic, int oc) {
  if (dinp != nullptr) sgemm(false, false, n, ic, oc, 1.0f, dout, oc, w, ic, 0.0f, dinp, ic);
  sgemm(true, false, oc, ic, n, 1.0f, dout, oc, inp, ic, 1.0f, dw, ic);
  if (dbias != nullptr) {
    for (int r = 0; r < n; ++r) {
      const float* d = dout + static_cast<std::size_t>(r) * oc;
      for (int j = 0; j < oc; ++j)
        dbias[j] += d[j];
    }
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int n, int c) {
  constexpr float kEps = 1e-5f;
  for (int r = 0; r < n; ++r) {
    const float* x = inp + static_cast<std::size_t>(r) * c;
    float* o = out + static_cast<std::size_t>(r) * c;
    float m = 0.0f;
    for (int i = 0; i < c; ++i)
      m += x[i];
    m /= static_cast<float>(c);
    float var = 0.0f;
    for (int i = 0; i < c; ++i)
      var += (x[i] - m) * (x[i] - m);
    var /= static_cast<float>(c);
    float s = 1.0f / std::sqrt(var + kEps);
    for (int i = 0; i < c; ++i)
      o[i] = (x[i] - m) * s * w[i] + b[i];
    if (mean != nullptr) mean[r] = m;
    if (rstd != nullptr) rstd[r] = s;
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int n, int c) {
  for (int r = 0; r < n; ++r) {
    const std::size_t base = static_cast<std::size_t>(r) * c;
    const float* d = dout + base;
    const float* x = inp + base;
    float* dx = dinp + base;
    const float m = mean[r];
    const float s = rstd[r];
    // Two reductions, then the gradient: dx = s * (dnorm - mean(dnorm) - xhat * mean(dnorm*xhat)).
    float dnorm_mean = 0.0f;
    float dnorm_xhat_mean = 0.0f;
    for (int i = 0; i < c; ++i) {
      float xhat = (x[i] - m) * s;
      float dnorm = w[i] * d[i];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean /= static_cast<float>(c);
    dnorm_xhat_mean /= static_cast<float>(c);
    for (int i = 0; i < c; ++i) {
      float xhat = (x[i] - m) * s;
      float dnorm = w[i] * d[i];
      db[i] += d[i];
      dw[i] += xhat * d[i];
      dx[i] += s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
    }
  }
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

// 0.5 * (1 + tanh(u)) == sigmoid(2u), and glibc's expf is several times faster than its tanhf
// (tanhf took 40% of a training step of the demo model), so GELU is written with the sigmoid.
void gelu_forward(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCubic * x * x * x);
    out[i] = x / (1.0f + std::exp(-2.0f * u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCubic * x * x * x);
    float s = 1.0f / (1.0f + std::exp(-2.0f * u));
    float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    // d/dx [x s(2u)] = s + 2 x s (1 - s) du
    float grad = s + 2.0f * x * s * (1.0f - s) * du;
    dinp[i] = grad * dout[i];
  }
}

void causal_softmax(float* att, int t) {
  for (int r = 0; r < t; ++r) {
    float* row = att + static_cast<std::size_t>(r) * t;
    float mx = row[0];
    for (int c = 1; c <= r; ++c)
      mx = std::fmax(mx, row[c]);
    float sum = 0.0f;
    for (int c = 0; c <= r; ++c) {
      row[c] = std::exp(row[c] - mx);
      sum += row[c];
    }
    float inv = 1.0f / sum;
    for (int c = 0; c <= r; ++c)
      row[c] *= inv;
    for (int c = r + 1; c < t; ++c)
      row[c] = 0.0f;
  }
}

void causal_softmax_backward(float* datt, const float* att, int t) {
  for (int r = 0; r < t; ++r) {
    float* d = datt + static_cast<std::size_t>(r) * t;
    const float* a = att + static_cast<std::size_t>(r) * t;
    float dot = 0.0f;
    for (int c = 0; c <= r; ++c)
      dot += a[c] * d[c];
    for (int c = 0; c <= r; ++c)
      d[c] = a[c] * (d[c] - dot);
    for (int c = r + 1; c < t; ++c)
      d[c] = 0.0f;
  }
}

float log_sum_exp(const float* x, int n) {
  float mx = x[0];
  for (int i = 1; i < n; ++i)
    mx = std::fmax(mx, x[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i)
    sum += std::exp(x[i] - mx);
  return mx + std::log(sum);
}

}  // namespace sluice::model::kernels

namespace sluice::model {

void set_blas_threads(int threads) {
  openblas_set_num_threads(threads < 1 ? 1 : threads);
}

int blas_threads() {
  return openblas_get_num_threads();
}

}  // namespace sluice::model
