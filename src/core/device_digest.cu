// Compiled by nvcc when SLUICE_ENABLE_CUDA is on (device_digest_none.cpp otherwise): the kernel
// that hashes many chunks at once, one chunk per thread, with core/sha256.hpp's code.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda_device.hpp"
#include "core/cuda_status.hpp"
#include "core/device_copy.hpp"
#include "core/device_digest.hpp"
#include "core/sha256.hpp"

namespace sluice::core {

namespace {

// Threads per block: one warp. Each thread is a serial chain over its own chunk, so a small block
// spreads a few hundred chunks over every SM (blocks of 256 would pile them onto a few).
constexpr unsigned kThreadsPerBlock = 32;

struct ChunkRef {
  const std::uint8_t* data;
  std::uint64_t bytes;
};

__device__ std::uint32_t byte_swap(std::uint32_t x) {
  return __byte_perm(x, 0, 0x0123);
}

// Thread i hashes chunk i into out[32 i, 32 i + 32). Whole blocks are read 16 bytes at a time
// when the chunk is 16-byte aligned (every chunk of a cudaMalloc'd image at a chunk boundary is),
// a byte at a time otherwise; the tail and padding go through sha256::finish.
__global__ void digest_chunks(const ChunkRef* chunks, std::uint32_t count, std::uint8_t* out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const ChunkRef c = chunks[i];
  std::uint32_t h[8];
  sha256::init(h);
  const std::uint64_t full = c.bytes / sha256::kBlockBytes;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(c.data) & 15u) == 0;
  for (std::uint64_t b = 0; b < full; ++b) {
    const std::uint8_t* p = c.data + b * sha256::kBlockBytes;
    if (aligned) {
      const uint4* q = reinterpret_cast<const uint4*>(p);
      std::uint32_t w[16];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint4 v = __ldg(q + j);
        w[4 * j] = byte_swap(v.x);
        w[4 * j + 1] = byte_swap(v.y);
        w[4 * j + 2] = byte_swap(v.z);
        w[4 * j + 3] = byte_swap(v.w);
      }
      sha256::compress(h, w);
    } else {
      sha256::compress_bytes(h, p);
    }
  }
  sha256::finish(h, c.data + full * sha256::kBlockBytes,
                 static_cast<std::size_t>(c.bytes - full * sha256::kBlockBytes), c.bytes,
                 out + static_cast<std::size_t>(i) * sha256::kDigestBytes);
}

// What one call holds on the device; released, and the thread's device restored, on every path.
struct Call {
  int previous_device = -1;
  cudaStream_t stream = nullptr;
  ChunkRef* refs = nullptr;
  std::uint8_t* out = nullptr;
  ~Call() {
    // Errors here are not reported: the call's result is already decided, and a failed free on
    // a device that failed leaves nothing else to do.
    if (stream) cudaStreamSynchronize(stream);
    if (refs) cudaFree(refs);
    if (out) cudaFree(out);
    if (stream) cudaStreamDestroy(stream);
    if (previous_device >= 0) cudaSetDevice(previous_device);
    cudaGetLastError();
  }
};

}  // namespace

bool device_digest_available() {
  return cuda_devices().count > 0;
}

Result<std::vector<Digest>> device_chunk_digests(const std::vector<DeviceChunk>& chunks) {
  std::vector<Digest> digests(chunks.size());
  if (chunks.empty()) return digests;
  const CudaDevices devs = cuda_devices();
  if (devs.count == 0) return failed_precondition("device digests: " + devs.why_none);
  if (chunks.size() > UINT32_MAX) return invalid_argument("device digests: too many chunks");
  int device = -1;
  std::vector<ChunkRef> refs(chunks.size());
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    refs[i] = {static_cast<const std::uint8_t*>(chunks[i].data), chunks[i].bytes};
    if (chunks[i].bytes == 0) continue;
    const DevicePointer p = device_pointer(chunks[i].data);
    if (!p.device) {
      return invalid_argument("device digests: chunk " + std::to_string(i) +
                              " is not device memory");
    }
    if (device >= 0 && p.ordinal != device) {
      return invalid_argument("device digests: chunk " + std::to_string(i) + " is on device " +
                              std::to_string(p.ordinal) + ", the chunks before it on device " +
                              std::to_string(device));
    }
    device = p.ordinal;
  }
  if (device < 0) device = 0;  // every chunk is empty: any device computes their digest
  Call call;
  SLUICE_TRY(cuda_check(cudaGetDevice(&call.previous_device), "find the current device"));
  SLUICE_TRY(cuda_check(cudaSetDevice(device), "select device " + std::to_string(device)));
  SLUICE_TRY(cuda_check(cudaStreamCreateWithFlags(&call.stream, cudaStreamNonBlocking),
                        "create a stream"));
  const std::size_t ref_bytes = refs.size() * sizeof(ChunkRef);
  const std::size_t out_bytes = refs.size() * sha256::kDigestBytes;
  SLUICE_TRY(cuda_check(cudaMalloc(reinterpret_cast<void**>(&call.refs), ref_bytes),
                        "allocate the chunk list"));
  SLUICE_TRY(cuda_check(cudaMalloc(reinterpret_cast<void**>(&call.out), out_bytes),
                        "allocate the digests"));
  SLUICE_TRY(cuda_check(
      cudaMemcpyAsync(call.refs, refs.data(), ref_bytes, cudaMemcpyHostToDevice, call.stream),
      "copy the chunk list to the device"));
  const auto count = static_cast<std::uint32_t>(refs.size());
  const unsigned blocks = (count + kThreadsPerBlock - 1) / kThreadsPerBlock;
  digest_chunks<<<blocks, kThreadsPerBlock, 0, call.stream>>>(call.refs, count, call.out);
  SLUICE_TRY(cuda_check(cudaGetLastError(), "launch the digest kernel"));
  std::vector<std::uint8_t> host(out_bytes);
  SLUICE_TRY(cuda_check(
      cudaMemcpyAsync(host.data(), call.out, out_bytes, cudaMemcpyDeviceToHost, call.stream),
      "copy the digests to the host"));
  SLUICE_TRY(cuda_check(
      cudaStreamSynchronize(call.stream),
      "digest " + std::to_string(count) + " chunks on device " + std::to_string(device)));
  for (std::size_t i = 0; i < digests.size(); ++i) {
    for (std::size_t j = 0; j < sha256::kDigestBytes; ++j)
      digests[i].bytes[j] = host[i * sha256::kDigestBytes + j];
  }
  return digests;
}

}  // namespace sluice::core
