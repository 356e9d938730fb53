#include "analysis/compare.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace sluice::cli {

namespace fs = std::filesystem;
using nlohmann::json;

core::Result<RunEvals> read_evals(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::ifstream f(dir / "metrics.jsonl");
  if (!f) return core::not_found(fmt::format("compare: no metrics.jsonl in {}", run_dir));
  RunEvals out;
  out.label =
      dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  if (std::ifstream s(dir / "summary.json"); s) {
    json j = json::parse(s, nullptr, false);
    if (j.is_object() && j.contains("mode") && j["mode"].is_string()) {
      out.label = j["mode"].get<std::string>();
    }
  }
  std::string line;
  while (std::getline(f, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    auto number = [&](const char* key, double& v) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_number()) return false;
      v = it->get<double>();
      return std::isfinite(v);
    };
    double acc = 0, samples = 0, t = 0;
    if (!number("accuracy", acc) || !number("samples", samples) || !number("t", t)) continue;
    if (samples < 0) continue;
    out.points.push_back({static_cast<std::uint64_t>(samples), t, acc});
  }
  if (out.points.empty()) {
    return core::invalid_argument(fmt::format(
        "compare: {}/metrics.jsonl has no evaluation (a line with accuracy, samples and t); was "
        "the job run with actor.eval_every > 0?",
        run_dir));
  }
  return out;
}

core::Result<Comparison> compare_evals(const RunEvals& a, const RunEvals& b) {
  auto first_at = [](const RunEvals& r) {
    std::map<std::uint64_t, EvalPoint> m;
    for (const auto& p : r.points)
      m.emplace(p.samples, p);  // keeps the first evaluation at each count
    return m;
  };
  const auto ma = first_at(a);
  const auto mb = first_at(b);
  Comparison c;
  c.label_a = a.label;
  c.label_b = b.label;
  for (const auto& [samples, pa] : ma) {
    auto it = mb.find(samples);
    if (it == mb.end()) continue;
    c.rows.push_back({samples, pa, it->second});
    c.max_gap_points =
        std::max(c.max_gap_points, 100.0 * std::abs(pa.accuracy - it->second.accuracy));
  }
  if (c.rows.empty()) {
    return core::invalid_argument(fmt::format(
        "compare: {} and {} were never evaluated at the same number of trained samples (same "
        "batch_trajectories and eval_every make them line up)",
        a.label, b.label));
  }
  return c;
}

std::string format_comparison(const Comparison& c, double within_points) {
  std::string out = fmt::format(
      "| trained samples | {0}: held-out accuracy | {0}: time | {1}: "
      "held-out accuracy | {1}: time | gap (points) |\n",
      c.label_a, c.label_b);
  out += "| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& r : c.rows) {
    out += fmt::format("| {} | {:.1f}% | {:.1f} s | {:.1f}% | {:.1f} s | {:+.1f} |\n", r.samples,
                       100.0 * r.a.accuracy, r.a.t, 100.0 * r.b.accuracy, r.b.t,
                       100.0 * (r.b.accuracy - r.a.accuracy));
  }
  const CompareRow& last = c.rows.back();
  out += fmt::format(
      "largest accuracy gap at equal samples: {:.1f} points ({} {:.1f})\n", c.max_gap_points,
      c.max_gap_points <= within_points ? "comparable: within" : "NOT within", within_points);
  const char* sooner = last.a.t < last.b.t   ? c.label_a.c_str()
                       : last.b.t < last.a.t ? c.label_b.c_str()
                                             : "neither";
  out += fmt::format(
      "at {} trained samples: {} {:.1f}% after {:.1f} s, {} {:.1f}% after {:.1f} s; {} got there "
      "sooner ({} / {} time: {:.2f})\n",
      last.samples, c.label_a, 100.0 * last.a.accuracy, last.a.t, c.label_b,
      100.0 * last.b.accuracy, last.b.t, sooner, c.label_b, c.label_a,
      last.a.t > 0 ? last.b.t / last.a.t : 0.0);
  return out;
}

namespace {

// terms -> (prompts, correct), or nothing when `text` is not an array of [terms, prompts, correct].
bool parse_by_terms(const std::string& text,
                    std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>>& out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array() || j.empty()) return false;
  for (const auto& e : j) {
    if (!e.is_array() || e.size() != 3) return false;
    for (const auto& x : e)
      if (!x.is_number_unsigned()) return false;
    const auto prompts = e[1].get<std::uint64_t>(), correct = e[2].get<std::uint64_t>();
    if (prompts == 0 || correct > prompts) return false;
    out[e[0].get<std::uint64_t>()] = {prompts, correct};
  }
  return true;
}

}  // namespace

std::string format_by_terms(const std::string& initial_json, const std::string& final_json) {
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> before, after;
  if (!parse_by_terms(initial_json, before) || !parse_by_terms(final_json, after)) return "";
  std::string out =
      "held-out accuracy by number of terms:\n  terms  prompts  warm start      end\n";
  for (const auto& [terms, a] : after) {
    auto b = before.find(terms);
    if (b == before.end()) continue;
    auto pct = [](std::pair<std::uint64_t, std::uint64_t> p) {
      return 100.0 * static_cast<double>(p.second) / static_cast<double>(p.first);
    };
    out += fmt::format("  {:>5}  {:>7}  {:>9.1f}%  {:>6.1f}%\n", terms, a.first, pct(b->second),
                       pct(a));
  }
  return out;
}

int run_compare(const std::string& dir_a, const std::string& dir_b, double within_points) {
  auto c = [&]() -> core::Result<Comparison> {
    SLUICE_ASSIGN_OR_RETURN(RunEvals a, read_evals(dir_a));
    SLUICE_ASSIGN_OR_RETURN(RunEvals b, read_evals(dir_b));
    return compare_evals(a, b);
  }();
  if (!c.is_ok()) {
    std::fprintf(stderr, "sluice compare: %s\n", c.status().to_string().c_str());
    return 2;
  }
  std::fputs(format_comparison(*c, within_points).c_str(), stdout);
  return 0;
}

}  // namespace sluice::cli
