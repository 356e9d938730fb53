// `sluice bench digest`: what verifying chunks costs, per hash, on this machine's cores.
//
// Hashes --size bytes of pseudo-random data in chunks of --chunk with each hash in --hashes:
// - xxh3: the chunk checksum (XXH3-64, xxHash's dispatching entry point), a check against
// accidents;
// - sha256: the chunk digest a version's signature covers (OpenSSL's, with the CPU's SHA
//   instructions where it has them);
// - blake2b: libsodium's BLAKE2b-256, the other candidate the digest was chosen against.
// Each on 1 thread, then on --threads threads (default: the host's cores), the chunks shared out
// among them, each --rounds times (the best round counts: the machine is shared). One row per hash
// and thread count: GB/s, core-seconds per GB (threads / GB/s), and how many cores of this speed a
// link of --link-gbps (default 50 GB/s, 400 Gbit/s) would need to verify at its rate. The load
// average and the CPU busy over the run are printed with the table; a figure taken while other
// work kept the cores busy is not a figure.
//
// With --device: SHA-256 on each GPU instead (core/device_digest.hpp, one chunk per thread),
// --size of each GPU's memory in chunks of --chunk: one chunk alone (one thread's rate: how long
// the last chunk of a load takes after it lands) and every chunk at once (the GPU's rate with that
// many chunks in flight), each checked against OpenSSL's digest of the same bytes. Exits 77
// (kExitNoDevice) on a machine without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct BenchDigestArgs {
  std::string size = "1GiB";
  std::string chunk = "4MiB";
  std::vector<std::string> hashes = {"xxh3", "sha256", "blake2b"};
  unsigned threads = 0;  // 0: the host's cores
  unsigned rounds = 3;
  double link_gbps = 50.0;  // GB/s
  bool json = false;
  bool device = false;  // hash on each GPU instead of the CPU
};

int run_bench_digest(const BenchDigestArgs& args);
// The --device half (bench_digest_device.cpp), with --size and --chunk parsed.
int run_bench_digest_device(const BenchDigestArgs& args, std::uint64_t size, std::uint64_t chunk);

}  // namespace sluice::cli
