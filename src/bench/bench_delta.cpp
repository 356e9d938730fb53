#include "bench/bench_delta.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "actor/learner.hpp"
#include "bench/bench_util.hpp"
#include "bench/learner_runs.hpp"
#include "core/config.hpp"
#include "core/units.hpp"
#include "format/bf16.hpp"
#include "format/delta.hpp"
#include "launch/job.hpp"
#include "model/blas.hpp"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Row {
  std::string source;  // "synthetic 1%", "grpo-arith 3->4"
  double changed = 0.0;
  std::uint64_t full = 0;
  std::uint64_t delta = 0;
  double encode_mbps = 0.0;
  double decode_mbps = 0.0;
  bool exact = false;
  core::DeltaStats stats;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Encodes, decodes and compares one pair; `element` is the bytes of one value (4 fp32, 2 bf16).
core::Result<Row> measure(const std::string& source, const std::vector<std::uint8_t>& base,
                          const std::vector<std::uint8_t>& target, std::uint64_t chunk,
                          const BenchDeltaArgs& args, std::size_t element = 4) {
  Row r;
  r.source = source;
  r.full = target.size();
  core::DeltaOptions o;
  o.zstd_level = args.level;
  auto t0 = Clock::now();
  SLUICE_ASSIGN_OR_RETURN(auto blob, core::encode_delta(base, target, 1, 2, chunk, o, &r.stats));
  const double enc = seconds_since(t0);
  std::vector<std::uint8_t> out(target.size());
  t0 = Clock::now();
  SLUICE_TRY(core::apply_delta(blob, base, out));
  const double dec = seconds_since(t0);
  r.delta = blob.size();
  const auto fraction = [](std::uint64_t part, std::uint64_t whole) {
    return whole ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
  };
  r.changed = element == 2 ? fraction(r.stats.changed_values16, r.stats.values16)
                           : fraction(r.stats.changed_words, r.stats.words);
  r.encode_mbps = static_cast<double>(r.full) / 1e6 / std::max(enc, 1e-9);
  r.decode_mbps = static_cast<double>(r.full) / 1e6 / std::max(dec, 1e-9);
  r.exact = std::memcmp(out.data(), target.data(), target.size()) == 0;
  return r;
}

void print(const Row& r, bool json) {
  const double ratio = static_cast<double>(r.delta) / static_cast<double>(r.full);
  if (json) {
    std::printf(
        "{\"source\": \"%s\", \"changed_fraction\": %.6f, \"full_bytes\": %llu, \"delta_bytes\": "
        "%llu, \"ratio\": %.5f, \"saved_bytes\": %lld, \"encode_mbps\": %.0f, \"decode_mbps\": "
        "%.0f, \"bit_exact\": %s, \"chunks_same\": %llu, \"chunks_xor\": %llu, "
        "\"chunks_sparse\": %llu, \"chunks_sparse16\": %llu}\n",
        r.source.c_str(), r.changed, static_cast<unsigned long long>(r.full),
        static_cast<unsigned long long>(r.delta), ratio,
        static_cast<long long>(r.full) - static_cast<long long>(r.delta), r.encode_mbps,
        r.decode_mbps, r.exact ? "true" : "false",
        static_cast<unsigned long long>(r.stats.same_chunks),
        static_cast<unsigned long long>(r.stats.xor_chunks),
        static_cast<unsigned long long>(r.stats.sparse_chunks),
        static_cast<unsigned long long>(r.stats.sparse16_chunks));
  } else {
    std::printf("%-26s %9.4f%% %12llu %12llu %8.4f %12lld %9.0f %9.0f  %-5s %u/%u/%u/%u\n",
                r.source.c_str(), 100.0 * r.changed, static_cast<unsigned long long>(r.full),
                static_cast<unsigned long long>(r.delta), ratio,
                static_cast<long long>(r.full) - static_cast<long long>(r.delta), r.encode_mbps,
                r.decode_mbps, r.exact ? "yes" : "NO", static_cast<unsigned>(r.stats.same_chunks),
                static_cast<unsigned>(r.stats.xor_chunks),
                static_cast<unsigned>(r.stats.sparse_chunks),
                static_cast<unsigned>(r.stats.sparse16_chunks));
  }
  std::fflush(stdout);
}

std::string default_job() {
  const std::string exe = self_exe();
  const std::string dir = exe.substr(0, exe.rfind('/'));
  for (const char* rel : {"/../examples/grpo_arith.json", "/../../examples/grpo_arith.json"}) {
    if (::access((dir + rel).c_str(), R_OK) == 0) return dir + rel;
  }
  return "examples/grpo_arith.json";
}

// The version the actor would publish: the weights as held (f32) or rounded to bf16.
std::vector<std::uint8_t> snapshot(const actor::Learner& l, bool bf16) {
  const auto& m = l.model();
  std::uint64_t bytes = 0;
  for (const auto& t : m.tensors())
    bytes = std::max(bytes, t.offset + t.bytes);
  const auto* p = reinterpret_cast<const std::uint8_t*>(m.params());
  if (!bf16) return {p, p + bytes};
  std::vector<std::uint8_t> out(bytes / 2);
  (void)core::round_to_bf16({m.params(), bytes / 4}, out);  // sizes match by construction
  return out;
}

core::Status save_version(const std::string& dir, std::uint32_t version,
                          const std::vector<std::uint8_t>& bytes) {
  const std::string path = fmt::format("{}/v{}.bin", dir, version);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) return core::internal_error("cannot write " + path);
  return {};
}

// One on-policy GRPO update of the job's batch size: what the actor does between two versions.
core::Status update(actor::Learner& l, const JobConfig& job, std::uint64_t& next_prompt,
                    std::uint64_t& rng, std::uint64_t version) {
  SLUICE_ASSIGN_OR_RETURN(SampledBatch batch,
                          sample_batch(l, BatchShape::of(job), next_prompt, rng, version));
  return l.train(batch.samples).status();
}

}  // namespace

int run_bench_delta(const BenchDeltaArgs& args) {
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "sluice bench delta: %s\n", what.c_str());
    return 2;
  };
  auto size = core::parse_bytes(args.size);
  auto chunk = core::parse_bytes(args.chunk);
  if (!size.is_ok()) return fail("--size: " + size.status().message());
  if (!chunk.is_ok()) return fail("--chunk: " + chunk.status().message());
  if (*size < 4 || *chunk == 0) return fail("--size must be at least 4 bytes, --chunk positive");
  for (double r : args.rates)
    if (!(r >= 0.0 && r <= 1.0)) return fail(fmt::format("--rates: {} is not within 0..1", r));
  if (args.level < 1 || args.level > 19) return fail("--level must be within 1..19");
  if (args.dtype != "f32" && args.dtype != "bf16")
    return fail("--dtype must be f32 or bf16, not " + args.dtype);
  const bool bf16 = args.dtype == "bf16";
  const std::size_t element = bf16 ? 2 : 4;
  if (!args.save_versions.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.save_versions, ec);
    if (ec) return fail("--save-versions: " + args.save_versions + ": " + ec.message());
  }

  if (!args.json) {
    std::printf("%-26s %10s %12s %12s %8s %12s %9s %9s  %-5s %s\n", "versions", "changed",
                "full bytes", "delta bytes", "ratio", "saved bytes", "enc MB/s", "dec MB/s",
                "exact", "chunks same/xor/sparse/sparse16");
  }
  bool all_exact = true;
  std::vector<std::uint8_t> base(*size);
  core::fill_weights_fp32(base, 2026);
  for (double rate : args.rates) {
    std::vector<std::uint8_t> target = base;
    core::optimizer_step_fp32(target, rate, 7 + static_cast<std::uint64_t>(rate * 1e6));
    auto row = measure(fmt::format("synthetic {:g}%", 100.0 * rate), base, target, *chunk, args);
    if (!row.is_ok()) return fail(row.status().to_string());
    all_exact = all_exact && row->exact;
    print(*row, args.json);
  }

  if (args.job != "none" && args.updates > 0) {
    const std::string path = args.job.empty() ? default_job() : args.job;
    auto job = load_learner_job(path, args.overrides, {},
                                "the delta bench (its versions are the reference GPT's)");
    if (!job.is_ok()) return fail(path + ": " + job.status().to_string());
    model::set_blas_threads(1);  // as the actor runs
    auto learner = actor::Learner::create(job->actor.learner);
    if (!learner.is_ok()) return fail(learner.status().to_string());
    std::fprintf(stderr, "%s: warm start, %u steps (version 1 is published after it)\n",
                 job->name.c_str(), job->actor.learner.warmstart_steps);
    auto ws = (*learner)->warm_start();
    if (!ws.is_ok()) return fail(ws.status().to_string());
    std::uint64_t next_prompt = 0, rng = 0x5eedULL;
    std::vector<std::uint8_t> prev = snapshot(**learner, bf16);
    const std::uint64_t job_chunk = job->actor.chunk_bytes;
    std::vector<double> ratios;  // full / delta per pair
    auto save = [&](std::uint32_t v, const std::vector<std::uint8_t>& bytes) {
      return args.save_versions.empty() ? core::Status{}
                                        : save_version(args.save_versions, v, bytes);
    };
    if (auto st = save(1, prev); !st.is_ok()) return fail(st.to_string());
    for (std::uint32_t u = 1; u <= args.updates; ++u) {
      auto st = update(**learner, *job, next_prompt, rng, u);
      if (!st.is_ok()) return fail(st.to_string());
      std::vector<std::uint8_t> next = snapshot(**learner, bf16);
      if (st = save(u + 1, next); !st.is_ok()) return fail(st.to_string());
      auto row = measure(fmt::format("{}{} v{}->v{}", job->name, bf16 ? " bf16" : "", u, u + 1),
                         prev, next, job_chunk, args, element);
      if (!row.is_ok()) return fail(row.status().to_string());
      all_exact = all_exact && row->exact;
      print(*row, args.json);
      ratios.push_back(static_cast<double>(row->full) / static_cast<double>(row->delta));
      prev = std::move(next);
    }
    std::sort(ratios.begin(), ratios.end());
    const std::size_t n = ratios.size();
    const double median = n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    if (args.json) {
      std::printf(
          "{\"source\": \"%s\", \"dtype\": \"%s\", \"pairs\": %zu, "
          "\"median_full_over_delta\": %.3f}\n",
          job->name.c_str(), args.dtype.c_str(), n, median);
    } else {
      std::printf("%s %s: median full/delta over %zu pairs: %.2fx (a delta is %.4f of a copy)\n",
                  job->name.c_str(), args.dtype.c_str(), n, median, 1.0 / median);
    }
  }
  return all_exact ? 0 : 1;
}

}  // namespace sluice::cli
