// The numerical building blocks of the reference model, in the style of llm.c: plain fp32 loops
// over row-major buffers, with OpenBLAS (cblas_sgemm) for every matrix product (or cuBLAS, see
// sgemm). Internal to sluice_model; the model code calls them top to bottom.
//
// Conventions: `n` rows of activations, `c` (or `ic`/`oc`) columns; a weight matrix is stored
// [out, in] (row-major), so a linear layer computes out = inp @ w^T + bias. Backward functions
// say for each output whether they overwrite it (=) or accumulate into it (+=).
//
// Thread safety: pure functions of their arguments (sgemm also of where products run, which is
// set at start-up).
#pragma once

#include <cstddef>

namespace sluice::model::kernels {

// C[m, n] = alpha * op(A) @ op(B) + beta * C, all row-major (a thin cblas_sgemm wrapper). Runs on
// cuBLAS instead, with the same contract, after model::use_device(Device::kCuda) (device.hpp).
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// out[n, oc] = inp[n, ic] @ w[oc, ic]^T + bias[oc]  (bias may be null).
void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int n, int ic,
                    int oc);
// dinp[n, ic] = dout @ w  (=, skipped when dinp is null); dw[oc, ic] += dout^T @ inp;
// dbias[oc] += column sums of dout (skipped when dbias is null).
void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int n, int ic, int oc);

// out = (inp - mean) * rstd * w + b per row; saves mean and rstd (may be null at inference).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int n, int c);
// dinp += ..., dw += ..., db += ...
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int n, int c);

// GELU, tanh approximation (as GPT-2).
void gelu_forward(float* out, const float* inp, std::size_t n);
// dinp = gelu'(inp) * dout  (=).
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);

// In place: row r of the [t, t] score matrix becomes softmax over columns 0..r; columns after r
// (the future) become 0.
void causal_softmax(float* att, int t);
// In place: turns d(probabilities) into d(scores) for causal_softmax's output `att`.
void causal_softmax_backward(float* datt, const float* att, int t);

// Returns log(sum(exp(x))) over n values, computed stably.
float log_sum_exp(const float* x, int n);

}  // namespace sluice::model::kernels
