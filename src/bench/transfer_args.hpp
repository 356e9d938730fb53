// The options of `sluice transfer-source`, `sluice transfer-read` and `sluice bench transfer`
// (bench/transfer_cmds.hpp runs them; bench/transfer_device.hpp reads them for device memory).
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct TransferSourceArgs {
  std::string listen = "tcp://127.0.0.1:*";
  std::string bytes = "64MiB";
  std::string chunk = "8MiB";
  std::string name = "bench";
  std::uint64_t seed = 1;
  long corrupt_chunk =
      -1;                // fault injection for tests: flip a byte of this chunk after checksumming
  bool ucx_get = false;  // serve no chunk stream: tcp readers use UCX's GET (for comparison)
  // Chunk stream encryption (core::TransferOptions::stream_encryption) with the "actor" key of
  // the job keys in `keys` (empty: none, clear only).
  std::string keys;
  std::string encryption = "auto";
};

struct TransferReadArgs {
  std::vector<std::string> from;  // control endpoints of the sources
  std::string name = "bench";
  unsigned in_flight = 8;
  int timeout_ms = 120000;
  int op_timeout_ms = 10000;
  bool warmup = true;
  // What each chunk is verified against: "digest" (SHA-256, as readers of signed versions do:
  // by checksum alone from a verified copy of this user on this host), "digest-all" (SHA-256
  // whoever holds the copy: TransferOptions::trust_same_user off) or "checksum" (XXH3 alone, as
  // before digests).
  std::string verify = "digest";
  unsigned repeat = 1;  // timed reads of the whole region; the JSON reports each and the best
  std::uint64_t verify_seed = 0;  // when non-zero: compare every byte with the seeded pattern
  bool ucx_get = false;           // read over UCX's GET even where a chunk stream is offered
  // "cuda": also pull into GPU memory and time it against the host pull and the host-to-device
  // copy (bench/transfer_device.cpp); exits 77 when there is no CUDA device.
  std::string memory = "host";
  std::string device_path = "auto";  // with cuda: auto, staged or direct (wire/device_read.hpp)
  bool fanout = false;  // with cuda: broadcast the pulled copy to the host's other GPUs (NCCL)
  // Chunk stream encryption with the "rollout-0" key of the job keys in `keys` (see
  // TransferSourceArgs). The JSON then also reports this process's CPU seconds in the timed
  // reads ("cpu_seconds").
  std::string keys;
  std::string encryption = "auto";
};

struct BenchTransferArgs {
  std::string transports = "tcp,sm";
  std::string size = "1GiB";
  std::string chunk = "8MiB";
  unsigned in_flight = 8;
  unsigned sources = 1;
  std::string link_rate;  // e.g. "500mbit": sources in emulated hosts behind rate-limited links
  bool json = false;
  // "cuda": pull into GPU memory and print it beside the link and the host-to-device copy;
  // exits 77 (skipped) when there is no CUDA device.
  std::string memory = "host";
  bool fanout = false;  // with cuda and two or more GPUs: NCCL fan-out to the others as well
  // Chunk stream encryption to compare on the tcp transport: "off", "on" or both ("off,on"),
  // each a row; with "on" the table adds the encrypted/clear throughput ratio and CPU seconds
  // per GiB (reader and source together) of each row.
  std::string encryption = "off";
  std::string verify = "digest";  // transfer-read's --verify (digest, digest-all, checksum)
};

// The exit status of a command that needs a GPU on a machine without one ("skipped": ctest's
// SKIP_RETURN_CODE, and what scripts/gpu_check.sh looks for).
inline constexpr int kExitNoDevice = 77;

}  // namespace sluice::cli
