// `sluice bench crossdc`: rollouts spread over emulated datacenters (scripts/emuhosts.sh --dcs:
// hosts behind LAN links on a bridge per datacenter, one rate-limited WAN link per datacenter),
// the trainer (weight store and publisher) on host 0 of datacenter 0. Per design, per version
// published: the bytes each datacenter's WAN link carried in and out (read from the links'
// counters, in copies of the version), the time from publish until every rollout holds the
// version, and the ratio to "direct".
//
// With --encryption off,on every design runs clear and encrypted (chunk streams, keys from the
// job's identities), and the table gives encrypted/clear: clear's seconds over encrypted's.
//
// Designs: "direct" (every rollout reads the trainer's copy), "seed" (a relay per host; the
// store chains one seed per datacenter across the WAN and fans out inside it; rollouts wait for
// their host's relay), and "delta" (seed, with version N+1 sent over the WAN as a delta against
// N: the trainer's datacenter's seed makes it, the other seeds read it; needs --hosts-per-dc >= 2),
// and "default" (relays as a job starts them, with no delta setting: each seed that a seed of
// another datacenter reads from makes deltas because the store tells it so).
//
// Versions are synthetic (--size bytes, --change-rate of the elements changed each time), or a
// job's real consecutive versions read from --versions-dir (files v<N>.bin of one size, as `bench
// delta --save-versions` writes them; --first-version picks where to start).
//
// The outer command sets up the hosts for each design and starts `bench crossdc-run` inside
// host 0, which starts the store, the publisher, the relays and one `bench crossdc-host`
// process per rollout host (its rollouts' readers), and prints one JSON line per version.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::cli {

struct BenchCrossdcArgs {
  unsigned dcs = 3;
  unsigned hosts_per_dc = 4;  // host 0 of datacenter 0 is the trainer's; every other host has
                              // a relay (seed, delta) and its rollouts
  unsigned rollouts_per_host = 2;
  std::string wan_rate = "200mbit";
  std::string lan_rate = "1gbit";
  std::string size = "32MiB";
  std::string chunk = "1MiB";
  unsigned versions = 2;
  double change_rate = 0.03;  // fraction of elements version N+1 changes against N
  // Real versions instead of synthetic ones: <dir>/v<first_version>.bin, then the next ones
  // (written by `bench delta --save-versions`), each published as it is (--size and
  // --change-rate unused). "" for synthetic versions.
  std::string versions_dir;
  unsigned first_version = 1;
  std::string designs = "direct,seed,delta,default";
  unsigned poll_ms = 100;  // how often each rollout asks for a newer version
  // seed: how often a rollout waiting for its host's relay asks for a read plan again (each
  // crosses the WAN to the store; ReaderOptions::local_check)
  unsigned local_check_ms = 500;
  // seed, delta: the relays' follow_poll_ms (how often a receiving relay asks the store for its
  // source's progress; every question from another datacenter than the store's crosses the WAN)
  unsigned relay_follow_ms = 20;
  // Long polls: how long the store may hold a rollout's or relay's question until it has news
  // (ReaderOptions::latest_wait, relay.latest_wait_ms and follow_wait_ms); 0: they poll.
  unsigned wait_ms = 1000;
  bool json = false;
  // Chunk stream encryption (TransferOptions::stream_encryption) of every process, one pass per
  // value: "auto" (encrypted between datacenters), "on", "off", or a list ("off,on") to run each
  // design with each, side by side, and print the encrypted/clear ratio.
  std::string encryptions = "auto";
  // crossdc-run and crossdc-host only
  std::string encryption = "auto";
  std::string design = "seed";
  std::string emuhosts;
  std::string prefix;
  std::string store;
  std::string keys;
  unsigned index = 0;
};

// `sluice bench crossdc`: every design side by side (runs `bench crossdc-run` inside host 0).
int run_bench_crossdc(const BenchCrossdcArgs& args, const std::vector<std::string>& env);

// --versions-dir: the paths of `count` consecutive version files from v<first>.bin and their
// common size. invalid_argument naming the file that is missing, empty or of another size.
struct RealVersionFiles {
  std::vector<std::string> paths;
  std::uint64_t bytes = 0;
};
core::Result<RealVersionFiles> real_version_files(const std::string& dir, unsigned first,
                                                  unsigned count);

// The parts (bench_crossdc_run.cpp).
// The start of a part's command line (`sluice bench <part>`, crossdc-run or crossdc-host) with
// the options both take from `a`: design, hosts and rollouts per host, polling, encryption.
std::vector<std::string> crossdc_part_argv(const std::string& exe, const std::string& part,
                                           const BenchCrossdcArgs& a);
int run_bench_crossdc_inside(const BenchCrossdcArgs& args, const std::vector<std::string>& env);
int run_bench_crossdc_host(const BenchCrossdcArgs& args, const std::vector<std::string>& env);

}  // namespace sluice::cli
