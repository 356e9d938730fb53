#include "launch/replay_cmd.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "actor/batch_record_file.hpp"
#include "actor/replay.hpp"
#include "launch/role_start.hpp"
#include "model/blas.hpp"
#include "model/device.hpp"

namespace sluice::cli {

namespace {

namespace fs = std::filesystem;

int failed(const core::Status& s) {
  std::fprintf(stderr, "sluice replay: %s\n", s.to_string().c_str());
  return kExitFailed;
}

// The actor's summary in the run folder, if it wrote one (a run stopped hard may not have).
std::optional<nlohmann::json> actor_summary(const fs::path& run_dir) {
  std::ifstream f(run_dir / "actor-summary.json");
  if (!f) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

void print_eval(const char* when, const actor::EvalStats& e) {
  std::printf("replay: held-out evaluation %s: accuracy %.4f over %zu prompts, reward %.4f\n", when,
              e.accuracy, e.prompts, e.mean_reward);
}

// What is compared at the end: the record's steps against the summary's, the last weights
// against the run's final weights. Returns the first difference (empty: none).
core::Result<std::string> check_end(const actor::Replay& replay, const fs::path& run_dir,
                                    std::uint64_t steps,
                                    const std::optional<nlohmann::json>& summary) {
  if (summary && summary->contains("steps")) {
    const auto want = (*summary)["steps"].get<std::uint64_t>();
    if (want != steps) {
      return fmt::format("the record ends at step {}, the run took {} steps (actor-summary.json)",
                         steps, want);
    }
  }
  const fs::path weights = run_dir / "final_weights.safetensors";
  if (!fs::exists(weights)) {
    std::printf("replay: %s is not there: the final weights were not compared\n",
                weights.string().c_str());
    return std::string();
  }
  SLUICE_ASSIGN_OR_RETURN(std::string diff, replay.compare_weights(weights.string()));
  if (diff.empty()) std::printf("replay: the final weights match %s\n", weights.string().c_str());
  return diff;
}

}  // namespace

int run_replay(const ReplayArgs& args) {
  const fs::path run_dir(args.run_dir);
  const std::string path =
      args.record.empty() ? (run_dir / "actor-batches.bin").string() : args.record;
  if (!fs::exists(path)) {
    std::fprintf(stderr,
                 "sluice replay: %s has no batch record (the actor writes one with "
                 "actor.record_batches on, the default, and policy gpt)\n",
                 path.c_str());
    return kExitFailed;
  }
  auto reader = actor::BatchRecordReader::open(path);
  if (!reader.is_ok()) return failed(reader.status());
  const actor::RecordStart& start = (*reader)->start();
  auto config = actor::replay_config(start, args.overrides);
  if (!config.is_ok()) {
    std::fprintf(stderr, "sluice replay: %s\n", config.status().to_string().c_str());
    return kExitUsage;
  }
  const bool exact = args.overrides.empty();
  // The arithmetic the run had: its BLAS threads (the actor role sets 1) and device.
  model::set_blas_threads(static_cast<int>(start.blas_threads));
  auto device = model::parse_device(config->device);
  if (!device.is_ok()) return failed(device.status());
  if (core::Status s = model::use_device(*device); !s.is_ok()) return failed(s);
  auto replay = actor::Replay::create(*config, start, exact);
  if (!replay.is_ok()) return failed(replay.status());
  std::printf("replay: %s: %s, %zu starting parameters, %u BLAS thread(s), device %s\n",
              path.c_str(), exact ? "checking each step against the run" : "another learner",
              start.weights.size(), start.blas_threads, config->device.c_str());
  for (const auto& o : args.overrides)
    std::printf("replay: --set %s\n", o.c_str());

  std::uint64_t steps = 0;
  while (true) {
    auto next = (*reader)->next();
    if (!next.is_ok()) return failed(next.status());
    if (!next->has_value()) break;
    const actor::RecordedStep& r = **next;
    auto done = (*replay)->step(r);
    if (!done.is_ok()) return failed(done.status());
    steps = r.step;
    if (!done->mismatch.empty()) {
      std::printf("replay: step %llu does not match the run: %s\n",
                  static_cast<unsigned long long>(r.step), done->mismatch.c_str());
      std::fprintf(stderr, "sluice replay: mismatch at step %llu of %s\n",
                   static_cast<unsigned long long>(r.step), path.c_str());
      return kExitFailed;
    }
    if (!args.quiet) {
      std::printf("step %llu: %zu samples (version %llu), loss %.6g, reward %.4f%s\n",
                  static_cast<unsigned long long>(r.step), done->samples,
                  static_cast<unsigned long long>(r.actor_version), done->stats.loss,
                  done->stats.mean_reward, exact ? ", match" : "");
    }
    if (args.eval_every > 0 && r.step % args.eval_every == 0) {
      auto e = (*replay)->learner().evaluate();
      if (!e.is_ok()) return failed(e.status());
      print_eval(fmt::format("after step {}", r.step).c_str(), *e);
    }
  }
  std::fflush(stdout);
  const auto summary = actor_summary(run_dir);
  if (exact) {
    auto diff = check_end(**replay, run_dir, steps, summary);
    if (!diff.is_ok()) return failed(diff.status());
    if (!diff->empty()) {
      std::printf("replay: the end does not match the run: %s\n", diff->c_str());
      return kExitFailed;
    }
    std::printf("replay: %llu steps match the run bit for bit\n",
                static_cast<unsigned long long>(steps));
  } else {
    std::printf("replay: %llu steps fed through the changed learner\n",
                static_cast<unsigned long long>(steps));
  }
  if (args.eval || !exact) {
    auto e = (*replay)->learner().evaluate();
    if (!e.is_ok()) return failed(e.status());
    print_eval("at the end", *e);
    if (summary && summary->contains("final_accuracy")) {
      std::printf("replay: the run's final accuracy: %.4f\n",
                  (*summary)["final_accuracy"].get<double>());
    }
  }
  return 0;
}

}  // namespace sluice::cli
