// Compiled when SLUICE_ENABLE_CUDA is on (cuda_device_none.cpp otherwise).
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "core/cuda_device.hpp"

namespace sluice::core {

namespace {
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return internal_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

CudaDevices cuda_devices() {
  CudaDevices d;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    d.why_none = std::string("cuda: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return d;
  }
  d.count = n;
  if (n == 0) d.why_none = "cuda: no device";
  return d;
}

Status cuda_roundtrip_check(std::size_t bytes) {
  auto devs = cuda_devices();
  if (devs.count == 0) return failed_precondition(devs.why_none);
  SLUICE_TRY(cuda_status(cudaSetDevice(0), "cudaSetDevice"));
  void* host = nullptr;
  void* dev = nullptr;
  SLUICE_TRY(cuda_status(cudaMallocHost(&host, bytes), "cudaMallocHost"));
  Status s = cuda_status(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::vector<unsigned char> expect(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    expect[i] = static_cast<unsigned char>((i * 131) ^ (i >> 8));
  if (s.is_ok()) {
    std::memcpy(host, expect.data(), bytes);
    s = cuda_status(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  if (s.is_ok()) {
    std::memset(host, 0, bytes);
    s = cuda_status(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  }
  if (s.is_ok() && std::memcmp(host, expect.data(), bytes) != 0) {
    s = data_loss("cuda round trip returned different bytes");
  }
  if (dev) cudaFree(dev);
  cudaFreeHost(host);
  return s;
}

Status cuda_wait_legacy_stream(int device) {
  int previous = 0;
  SLUICE_TRY(cuda_status(cudaGetDevice(&previous), "cudaGetDevice"));
  SLUICE_TRY(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  Status waited =
      cuda_status(cudaStreamSynchronize(cudaStreamLegacy), "waiting for the legacy default stream");
  Status back = cuda_status(cudaSetDevice(previous), "cudaSetDevice (back)");
  return waited.is_ok() ? back : waited;
}

}  // namespace sluice::core
