// Compiled when SLUICE_ENABLE_CUDA is on (cuda_gemm_none.cpp otherwise).
#include "model/cuda_gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/log.hpp"

namespace sluice::model {

namespace {
core::Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  std::string msg = std::string(what) + ": " + cudaGetErrorString(e);
  cudaGetLastError();  // clear a sticky error so later calls report their own
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    return core::failed_precondition(msg);
  }
  return core::internal_error(msg);
}

core::Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return core::internal_error(std::string(what) + ": cublas status " +
                              std::to_string(static_cast<int>(s)));
}

core::Status have_device() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    std::string msg = std::string("cuda: ") + cudaGetErrorString(e);
    cudaGetLastError();
    return core::failed_precondition(msg);
  }
  if (n == 0) return core::failed_precondition("cuda: no device");
  return cuda_status(cudaSetDevice(0), "cudaSetDevice");
}
}  // namespace

core::Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::create(std::size_t size) {
  SLUICE_TRY(have_device());
  void* p = nullptr;
  SLUICE_TRY(
      cuda_status(cudaMalloc(&p, size == 0 ? sizeof(float) : size * sizeof(float)), "cudaMalloc"));
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(static_cast<float*>(p), size));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  cudaError_t e = cudaFree(data_);
  if (e != cudaSuccess)
    core::log::warn("device buffer: cudaFree failed: {}", cudaGetErrorString(e));
}

core::Status DeviceBuffer::upload(std::span<const float> host) {
  if (host.size() != size_) {
    return core::invalid_argument("device buffer upload: " + std::to_string(host.size()) +
                                  " floats into a buffer of " + std::to_string(size_));
  }
  return cuda_status(cudaMemcpy(data_, host.data(), size_ * sizeof(float), cudaMemcpyHostToDevice),
                     "cudaMemcpy H2D");
}

core::Status DeviceBuffer::download(std::span<float> host) const {
  if (host.size() != size_) {
    return core::invalid_argument("device buffer download: " + std::to_string(size_) +
                                  " floats into a host span of " + std::to_string(host.size()));
  }
  return cuda_status(cudaMemcpy(host.data(), data_, size_ * sizeof(float), cudaMemcpyDeviceToHost),
                     "cudaMemcpy D2H");
}

core::Status DeviceBuffer::upload_matrix(std::span<const float> host, int rows, int cols, int ld) {
  SLUICE_TRY(detail::check_operand("host matrix", rows, cols, ld, host.size()));
  SLUICE_TRY(detail::check_operand("device matrix", rows, cols, ld, size_));
  if (rows == 0 || cols == 0) return {};
  const std::size_t pitch = static_cast<std::size_t>(ld) * sizeof(float);
  return cuda_status(
      cudaMemcpy2D(data_, pitch, host.data(), pitch, static_cast<std::size_t>(cols) * sizeof(float),
                   static_cast<std::size_t>(rows), cudaMemcpyHostToDevice),
      "cudaMemcpy2D H2D");
}

core::Status DeviceBuffer::download_matrix(std::span<float> host, int rows, int cols,
                                           int ld) const {
  SLUICE_TRY(detail::check_operand("host matrix", rows, cols, ld, host.size()));
  SLUICE_TRY(detail::check_operand("device matrix", rows, cols, ld, size_));
  if (rows == 0 || cols == 0) return {};
  const std::size_t pitch = static_cast<std::size_t>(ld) * sizeof(float);
  return cuda_status(
      cudaMemcpy2D(host.data(), pitch, data_, pitch, static_cast<std::size_t>(cols) * sizeof(float),
                   static_cast<std::size_t>(rows), cudaMemcpyDeviceToHost),
      "cudaMemcpy2D D2H");
}

core::Result<std::unique_ptr<CublasGemm>> CublasGemm::create() {
  SLUICE_TRY(have_device());
  cublasHandle_t h = nullptr;
  SLUICE_TRY(cublas_status(cublasCreate(&h), "cublasCreate"));
  return std::unique_ptr<CublasGemm>(new CublasGemm(h));
}

CublasGemm::~CublasGemm() {
  if (handle_ == nullptr) return;
  cublasStatus_t s = cublasDestroy(static_cast<cublasHandle_t>(handle_));
  if (s != CUBLAS_STATUS_SUCCESS) {
    core::log::warn("cublas: cublasDestroy failed with status {}", static_cast<int>(s));
  }
}

core::Status CublasGemm::sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                               const DeviceBuffer& a, int lda, const DeviceBuffer& b, int ldb,
                               float beta, DeviceBuffer& c, int ldc) {
  SLUICE_TRY(detail::check_operand("A", trans_a ? k : m, trans_a ? m : k, lda, a.size()));
  SLUICE_TRY(detail::check_operand("B", trans_b ? n : k, trans_b ? k : n, ldb, b.size()));
  SLUICE_TRY(detail::check_operand("C", m, n, ldc, c.size()));
  if (m == 0 || n == 0) return {};
  // cuBLAS is column-major. A row-major X is the column-major X^T, so row-major C = op(A) op(B)
  // is column-major C^T = op(B)^T op(A)^T: swap the operands and m with n, keep the flags.
  SLUICE_TRY(cublas_status(
      cublasSgemm(static_cast<cublasHandle_t>(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.device_data(), ldb,
                  a.device_data(), lda, &beta, c.device_data(), ldc),
      "cublasSgemm"));
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---- kernels::sgemm on CUDA ----
//
// The model's buffers live in host memory, so every product copies A and B (and C) to the device
// and C back, synchronously from pageable memory: the operands cross PCIe on every product. This
// is a correctness path for the GPU, not a speed path; a fast one keeps weights and activations
// on the device.

namespace detail {

namespace {

// One per thread that runs products on CUDA: a cuBLAS handle is for one thread at a time, and
// per-thread scratch needs no lock. Destroyed at thread exit (for the main thread, before static
// destructors and the CUDA runtime's own exit handlers).
struct HostSgemm {
  std::unique_ptr<CublasGemm> gemm;
  std::unique_ptr<DeviceBuffer> a;
  std::unique_ptr<DeviceBuffer> b;
  std::unique_ptr<DeviceBuffer> c;
};

HostSgemm& host_sgemm() {
  thread_local HostSgemm state;
  return state;
}

// Grows `buf` to hold `need` floats: to at least twice its size, so that shapes creeping up one
// row at a time (attention over a growing sequence) reallocate O(log n) times, not every call.
// Never shrinks.
core::Status reserve(std::unique_ptr<DeviceBuffer>& buf, std::size_t need) {
  if (buf != nullptr && buf->size() >= need) return {};
  const std::size_t grown = buf == nullptr ? need : std::max(need, 2 * buf->size());
  buf.reset();  // free the old one first: the two need not fit on the device together
  SLUICE_ASSIGN_OR_RETURN(buf, DeviceBuffer::create(grown));
  return {};
}

core::Status run_host_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc) {
  SLUICE_TRY(prepare_cuda_sgemm());
  HostSgemm& s = host_sgemm();
  const int a_rows = trans_a ? k : m;
  const int a_cols = trans_a ? m : k;
  const int b_rows = trans_b ? n : k;
  const int b_cols = trans_b ? k : n;
  const std::size_t a_size = operand_floats(a_rows, a_cols, lda);
  const std::size_t b_size = operand_floats(b_rows, b_cols, ldb);
  const std::size_t c_size = operand_floats(m, n, ldc);
  SLUICE_TRY(reserve(s.a, a_size));
  SLUICE_TRY(reserve(s.b, b_size));
  SLUICE_TRY(reserve(s.c, c_size));
  SLUICE_TRY(s.a->upload_matrix({a, a_size}, a_rows, a_cols, lda));
  SLUICE_TRY(s.b->upload_matrix({b, b_size}, b_rows, b_cols, ldb));
  // With beta 0 cuBLAS does not read C (as cblas, a NaN there does not propagate), so it is not
  // uploaded; the download below writes only C's elements, so the stale gaps between its rows on
  // the device never reach the host.
  if (beta != 0.0f) SLUICE_TRY(s.c->upload_matrix({c, c_size}, m, n, ldc));
  SLUICE_TRY(
      s.gemm->sgemm(trans_a, trans_b, m, n, k, alpha, *s.a, lda, *s.b, ldb, beta, *s.c, ldc));
  return s.c->download_matrix({c, c_size}, m, n, ldc);
}

}  // namespace

bool cuda_built() {
  return true;
}

core::Status prepare_cuda_sgemm() {
  HostSgemm& s = host_sgemm();
  if (s.gemm != nullptr) return {};
  SLUICE_ASSIGN_OR_RETURN(s.gemm, CublasGemm::create());
  return {};
}

void host_sgemm_on_cuda(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                        int ldc) {
  core::Status s = run_host_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (s.is_ok()) return;
  // kernels::sgemm returns nothing and its callers trust the product: stop rather than go on
  // with a wrong one.
  core::log::error("model: sgemm on cuda (m {} n {} k {}, trans {}{}, ld {} {} {}) failed: {}", m,
                   n, k, trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', lda, ldb, ldc, s.to_string());
  std::abort();
}

}  // namespace detail

}  // namespace sluice::model
