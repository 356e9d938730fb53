#include "bench/study.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "actor/learner.hpp"
#include "analysis/report.hpp"
#include "bench/learner_runs.hpp"
#include "core/config.hpp"
#include "model/blas.hpp"

namespace sluice::cli {
namespace {

using Clock = std::chrono::steady_clock;
using core::config::Json;

constexpr std::uint32_t kMaxLag = 64;
constexpr std::uint32_t kMaxSeeds = 16;
constexpr const char* kCorrections[] = {"none", "behaviour-cap", "m2po"};

struct Setting {
  std::string label;
  std::uint32_t lag = 0;
  std::string correction;  // as actor.learner.correction takes it
};

struct Run {
  std::size_t setting = 0;
  std::uint32_t seed = 0;
  std::vector<std::uint32_t> at;            // updates done at each evaluation (0: the warm start)
  std::vector<double> accuracy;             // held-out accuracy at each
  std::vector<std::uint64_t> generated_by;  // per update (0-based): the version that sampled it
  double train_ms = 0.0;                    // Learner::train per update, mean
  double masked_fraction = 0.0;             // means over the updates
  double truncated_fraction = 0.0;
  double behaviour_kl = 0.0;
  double clip_fraction = 0.0;
  double seconds = 0.0;
};

// Mean and sample standard deviation (n - 1; 0 for one value).
std::pair<double, double> mean_std(const std::vector<double>& v) {
  if (v.empty()) return {0.0, 0.0};
  double sum = 0.0;
  for (double x : v)
    sum += x;
  const double mean = sum / static_cast<double>(v.size());
  if (v.size() < 2) return {mean, 0.0};
  double var = 0.0;
  for (double x : v)
    var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / static_cast<double>(v.size() - 1))};
}

// One setting over the seeds that finished.
struct Summary {
  std::size_t seeds = 0;
  std::vector<double> mean, std;  // per evaluation
  double last3 = 0.0;             // mean over seeds of the mean of the last 3 evaluations
  double train_ms = 0.0, masked = 0.0, truncated = 0.0, behaviour_kl = 0.0, seconds = 0.0;
};

Summary summarize(const std::vector<Run>& runs, std::size_t setting, std::size_t points) {
  Summary s;
  std::vector<const Run*> mine;
  for (const auto& r : runs)
    if (r.setting == setting) mine.push_back(&r);
  s.seeds = mine.size();
  if (mine.empty()) return s;
  for (std::size_t i = 0; i < points; ++i) {
    std::vector<double> v;
    for (const Run* r : mine)
      v.push_back(r->accuracy[i]);
    auto [m, d] = mean_std(v);
    s.mean.push_back(m);
    s.std.push_back(d);
  }
  const double n = static_cast<double>(mine.size());
  const std::size_t tail = std::min<std::size_t>(3, points - 1);
  for (const Run* r : mine) {
    double t = 0.0;
    for (std::size_t i = points - tail; i < points; ++i)
      t += r->accuracy[i] / static_cast<double>(tail);
    s.last3 += t / n;
    s.train_ms += r->train_ms / n;
    s.masked += r->masked_fraction / n;
    s.truncated += r->truncated_fraction / n;
    s.behaviour_kl += r->behaviour_kl / n;
    s.seconds += r->seconds / n;
  }
  return s;
}

struct Plan {
  JobConfig job;
  std::vector<Setting> settings;  // settings[0] is sync
  std::vector<std::uint32_t> lags;
  std::vector<std::string> corrections;
  std::uint32_t seeds = 0;
  std::uint32_t updates = 0;
  std::uint32_t every = 0;
  BatchShape shape;
  std::string command;
  std::string commit;
  std::filesystem::path out;
  std::size_t points() const { return updates / every + 1; }
  std::uint64_t samples_at(std::uint32_t update) const {
    return static_cast<std::uint64_t>(update) * job.manager.batch_trajectories;
  }
};

// ---- validation ----

core::Result<std::vector<std::uint32_t>> parse_lags(const std::vector<std::string>& items) {
  if (items.empty()) return core::invalid_argument("--lags: give at least one lag");
  std::vector<std::uint32_t> lags;
  for (const auto& item : items) {
    long long v = 0;
    const char* end = item.data() + item.size();
    auto [p, ec] = std::from_chars(item.data(), end, v);
    if (item.empty() || ec != std::errc() || p != end) {
      return core::invalid_argument("--lags: '" + item + "' is not a whole number");
    }
    if (v < 0 || v > kMaxLag) {
      return core::invalid_argument(fmt::format(
          "--lags: lag {} is outside 0..{} (updates behind the newest version)", v, kMaxLag));
    }
    const auto lag = static_cast<std::uint32_t>(v);
    if (std::find(lags.begin(), lags.end(), lag) != lags.end()) {
      return core::invalid_argument(fmt::format("--lags: lag {} is named twice", lag));
    }
    lags.push_back(lag);
  }
  std::sort(lags.begin(), lags.end());
  return lags;
}

core::Result<std::vector<std::string>> parse_corrections(const std::vector<std::string>& items) {
  if (items.empty()) return core::invalid_argument("--corrections: give at least one correction");
  std::vector<std::string> out;
  for (const auto& c : items) {
    if (std::find(std::begin(kCorrections), std::end(kCorrections), c) == std::end(kCorrections)) {
      return core::invalid_argument("--corrections: unknown correction '" + c +
                                    "' (valid: none, behaviour-cap, m2po)");
    }
    if (std::find(out.begin(), out.end(), c) != out.end()) {
      return core::invalid_argument("--corrections: '" + c + "' is named twice");
    }
    out.push_back(c);
  }
  return out;
}

std::string git_commit() {
  std::string out;
  if (FILE* p = ::popen("git rev-parse --short HEAD 2>/dev/null", "r")) {
    char buf[64];
    while (std::fgets(buf, sizeof(buf), p))
      out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out.empty() ? "unknown" : out;
}

core::Result<Plan> make_plan(const StudyArgs& args) {
  Plan plan;
  SLUICE_ASSIGN_OR_RETURN(plan.lags, parse_lags(args.lags));
  SLUICE_ASSIGN_OR_RETURN(plan.corrections, parse_corrections(args.corrections));
  if (args.jobs < 1 || args.jobs > 64) {
    return core::invalid_argument(fmt::format("--jobs is {}, must be within 1..64", args.jobs));
  }
  if (args.seeds < 1 || args.seeds > kMaxSeeds) {
    return core::invalid_argument(
        fmt::format("--seeds is {}, must be within 1..{}", args.seeds, kMaxSeeds));
  }
  plan.seeds = args.seeds;
  SLUICE_ASSIGN_OR_RETURN(plan.job,
                          load_learner_job(args.job, args.overrides, {}, "the staleness study"));
  const std::uint32_t available = job_updates(plan.job);
  plan.shape = BatchShape::of(plan.job);
  if (available == 0) {
    return core::invalid_argument("the job makes no update: manager.prompts is below one batch's " +
                                  std::to_string(plan.shape.per_update) + " prompts");
  }
  plan.updates = args.updates > 0 ? args.updates : available;
  if (plan.updates > available) {
    return core::invalid_argument(fmt::format(
        "--updates {} is more than the job provides: {} (manager.prompts {} / {} prompts per "
        "update)",
        plan.updates, available, plan.job.manager.prompts, plan.shape.per_update));
  }
  plan.every = args.every > 0 ? args.every
               : plan.job.actor.eval_every > 0
                   ? static_cast<std::uint32_t>(plan.job.actor.eval_every)
                   : plan.updates;
  if (plan.updates % plan.every != 0) {
    return core::invalid_argument(fmt::format(
        "--updates {} is not a multiple of --every {}: every setting and seed must be evaluated "
        "at the same sample counts",
        plan.updates, plan.every));
  }
  // Every setting's learner config, checked before anything starts.
  plan.settings.push_back({"sync", 0, plan.job.actor.learner.correction});
  for (std::uint32_t lag : plan.lags) {
    if (lag == 0) continue;
    for (const auto& c : plan.corrections)
      plan.settings.push_back({fmt::format("lag {}, {}", lag, c), lag, c});
  }
  for (const auto& s : plan.settings) {
    actor::LearnerConfig lc = plan.job.actor.learner;
    lc.correction = s.correction;
    SLUICE_TRY(lc.validate().with_context(s.label));
  }
  std::string cmd = "sluice study staleness " + args.job + " --lags ";
  for (std::size_t i = 0; i < plan.lags.size(); ++i)
    cmd += (i ? "," : "") + std::to_string(plan.lags[i]);
  cmd += " --corrections ";
  for (std::size_t i = 0; i < plan.corrections.size(); ++i)
    cmd += (i ? "," : "") + plan.corrections[i];
  cmd += fmt::format(" --seeds {} --updates {} --every {}", plan.seeds, plan.updates, plan.every);
  for (const auto& o : args.overrides)
    cmd += " --set " + o;
  plan.command = cmd;
  plan.commit = git_commit();

  if (args.out.empty()) {
    std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    plan.out = fmt::format("runs/study-staleness-{}-{}", stamp, ::getpid());
  } else {
    plan.out = args.out;
  }
  std::error_code ec;
  if (!args.replot.empty()) {
    plan.out = args.replot;
    return plan;
  }
  if (std::filesystem::exists(plan.out, ec) && !std::filesystem::is_empty(plan.out, ec)) {
    return core::invalid_argument("--out " + plan.out.string() +
                                  " already holds files: give a new or empty folder");
  }
  return plan;
}

// ---- one run ----

core::Result<Run> run_setting(const Plan& plan, std::size_t setting, std::uint32_t seed,
                              const std::string& warm, double warm_accuracy) {
  const Setting& s = plan.settings[setting];
  actor::LearnerConfig lc = plan.job.actor.learner;
  lc.correction = s.correction;
  SLUICE_ASSIGN_OR_RETURN(auto learner, actor::Learner::create(lc));
  SLUICE_TRY(learner->load(warm));
  // The generator: a second learner that holds the weights of `lag` updates ago. The ring holds
  // versions front_version .. newest; after update u it holds max(0, u + 1 - lag) .. u + 1.
  std::unique_ptr<actor::Learner> generator;
  std::deque<std::vector<float>> ring;
  std::uint64_t front_version = 0;
  std::uint64_t loaded = 0;  // the version the generator holds
  auto snapshot = [&] {
    const model::Gpt& m = learner->model();
    ring.emplace_back(m.params(), m.params() + m.param_count());
  };
  if (s.lag > 0) {
    SLUICE_ASSIGN_OR_RETURN(generator, actor::Learner::create(lc));
    SLUICE_TRY(generator->load(warm));
    snapshot();
  }
  Run r;
  r.setting = setting;
  r.seed = seed;
  r.at.push_back(0);
  r.accuracy.push_back(warm_accuracy);
  std::uint64_t rng = round_rng(seed);
  std::uint64_t next_prompt = round_first_prompt(seed, plan.updates, plan.shape.per_update);
  double train_s = 0.0;
  const auto t0 = Clock::now();
  for (std::uint32_t u = 0; u < plan.updates; ++u) {
    const std::uint64_t version = u >= s.lag ? u - s.lag : 0;
    actor::Learner* g = learner.get();
    if (s.lag > 0) {
      if (version < front_version || version - front_version >= ring.size()) {
        return core::internal_error(fmt::format("study: version {} is not in the ring ({}..{})",
                                                version, front_version,
                                                front_version + ring.size() - 1));
      }
      if (loaded != version) {
        SLUICE_TRY(generator->load_weights(ring[version - front_version]));
        loaded = version;
      }
      g = generator.get();
    }
    SLUICE_ASSIGN_OR_RETURN(SampledBatch batch,
                            sample_batch(*g, plan.shape, next_prompt, rng, version));
    r.generated_by.push_back(version);
    const auto ts = Clock::now();
    SLUICE_ASSIGN_OR_RETURN(actor::TrainStats ts_stats, learner->train(batch.samples));
    train_s += std::chrono::duration<double>(Clock::now() - ts).count();
    const double n = static_cast<double>(plan.updates);
    r.masked_fraction += ts_stats.masked_fraction / n;
    r.truncated_fraction += ts_stats.truncated_fraction / n;
    r.behaviour_kl += ts_stats.behaviour_kl / n;
    r.clip_fraction += ts_stats.clip_fraction / n;
    if (s.lag > 0) {
      snapshot();
      while (ring.size() > s.lag + 1) {
        ring.pop_front();
        ++front_version;
      }
    }
    const std::uint32_t done = u + 1;
    if (done % plan.every == 0) {
      SLUICE_ASSIGN_OR_RETURN(actor::EvalStats e, learner->evaluate());
      r.at.push_back(done);
      r.accuracy.push_back(e.accuracy);
      std::fprintf(stderr,
                   "study: seed %u/%u, %s: update %u/%u, held-out accuracy %.1f%% (%.0f s)\n",
                   seed + 1, plan.seeds, s.label.c_str(), done, plan.updates, 100.0 * e.accuracy,
                   std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.train_ms = 1000.0 * train_s / plan.updates;
  return r;
}

// ---- output ----

std::string pct(double x) {
  return fmt::format("{:.1f}", 100.0 * x);
}

// The evaluation indices the table shows: about a quarter, half and three quarters of the way,
// and the end (all of them when there are at most four).
std::vector<std::size_t> table_points(std::size_t points) {
  std::vector<std::size_t> out;
  if (points <= 5) {
    for (std::size_t i = 1; i < points; ++i)
      out.push_back(i);
    return out;
  }
  const std::size_t last = points - 1;
  for (std::size_t q = 1; q <= 4; ++q) {
    const std::size_t i = std::max<std::size_t>(1, (last * q + 2) / 4);
    if (out.empty() || out.back() != i) out.push_back(i);
  }
  return out;
}

struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
};

Table make_table(const Plan& plan, const std::vector<Run>& runs) {
  Table t;
  const std::size_t points = plan.points();
  const auto shown = table_points(points);
  t.head = {"setting", "seeds"};
  for (std::size_t i : shown)
    t.head.push_back(fmt::format("acc. at {} samples",
                                 plan.samples_at(static_cast<std::uint32_t>(i * plan.every))));
  t.head.insert(t.head.end(), {"mean of last 3 evals", "gap to sync, end", "gap to sync, last 3",
                               "learner ms/step", "x sync", "masked", "truncated", "behaviour KL"});
  const Summary sync = summarize(runs, 0, points);
  for (std::size_t k = 0; k < plan.settings.size(); ++k) {
    const Summary s = summarize(runs, k, points);
    std::vector<std::string> row{plan.settings[k].label, std::to_string(s.seeds)};
    if (s.seeds == 0) {
      row.resize(t.head.size(), "-");
      t.rows.push_back(row);
      continue;
    }
    for (std::size_t i : shown)
      row.push_back(fmt::format("{} ± {}", pct(s.mean[i]), pct(s.std[i])));
    row.push_back(pct(s.last3));
    const bool have_sync = sync.seeds > 0;
    row.push_back(k == 0 || !have_sync
                      ? "-"
                      : fmt::format("{:+.1f}", 100.0 * (s.mean.back() - sync.mean.back())));
    row.push_back(k == 0 || !have_sync ? "-"
                                       : fmt::format("{:+.1f}", 100.0 * (s.last3 - sync.last3)));
    row.push_back(fmt::format("{:.0f}", s.train_ms));
    row.push_back(have_sync && sync.train_ms > 0 ? fmt::format("{:.2f}", s.train_ms / sync.train_ms)
                                                 : "-");
    row.push_back(fmt::format("{:.1f}%", 100.0 * s.masked));
    row.push_back(fmt::format("{:.1f}%", 100.0 * s.truncated));
    row.push_back(fmt::format("{:.4f}", s.behaviour_kl));
    t.rows.push_back(row);
  }
  return t;
}

std::string markdown(const Table& t) {
  std::string out = "|";
  for (const auto& h : t.head)
    out += " " + h + " |";
  out += "\n|";
  for (std::size_t i = 0; i < t.head.size(); ++i)
    out += " --- |";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (const auto& c : row)
      out += " " + c + " |";
    out += "\n";
  }
  return out;
}

const char* correction_colour(const std::string& c) {
  if (c == "none") return "#d62728";
  if (c == "behaviour-cap") return "#1f77b4";
  if (c == "m2po") return "#2ca02c";
  return "#9467bd";
}

// A curve of the figure.
struct Series {
  std::string label;
  std::string colour;
  std::string dash;  // stroke-dasharray, "" for solid
  double width = 1.8;
  const Summary* summary = nullptr;
  bool band = false;
};

// After a curve's label: how many seeds it is the mean of, when not all yet.
std::string legend_note(const Plan& plan, const Summary* s) {
  if (!s || s->seeds == 0) return " (not run yet)";
  if (s->seeds < plan.seeds) return fmt::format(" ({} of {} seeds)", s->seeds, plan.seeds);
  return "";
}

// One panel at (x, y) of size w x h: accuracy (%) against trained samples, mean over seeds, with
// a band of +- std where asked.
std::string panel(const Plan& plan, double x, double y, double w, double h,
                  const std::string& title, const std::vector<Series>& series, double lo,
                  double hi) {
  const double ml = 46, mr = 22, mt = 24, mb = 34;
  const double pw = w - ml - mr, ph = h - mt - mb;
  const double xmax = static_cast<double>(plan.samples_at(plan.updates));
  auto px = [&](double samples) { return x + ml + pw * samples / xmax; };
  auto py = [&](double acc) { return y + mt + ph * (1.0 - (acc - lo) / (hi - lo)); };
  std::string o;
  o += fmt::format(
      "<g><text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      x + ml, y + 16, escape_html(title));
  o += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
      "stroke=\"#999\"/>\n",
      x + ml, y + mt, pw, ph);
  // y grid every 5 points
  for (double a = std::ceil(lo * 20.0) / 20.0; a <= hi + 1e-9; a += 0.05) {
    o += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"end\">{:.0f}%</text>\n",
        x + ml, x + ml + pw, py(a), py(a), x + ml - 4, py(a) + 3, 100.0 * a);
  }
  for (int q = 0; q <= 4; ++q) {
    const double s = xmax * q / 4.0;
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">{:.0f}</text>\n",
        px(s), y + mt + ph + 13, s);
  }
  o += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\">trained samples "
      "(trajectories)</text>\n",
      x + ml + pw / 2, y + h - 4);
  const std::size_t points = plan.points();
  for (const auto& s : series) {
    if (!s.summary || s.summary->seeds == 0) continue;
    if (s.band && s.summary->seeds > 1) {
      std::string pts;
      for (std::size_t i = 0; i < points; ++i)
        pts += fmt::format("{:.1f},{:.1f} ", px(plan.samples_at(i * plan.every)),
                           py(std::min(hi, s.summary->mean[i] + s.summary->std[i])));
      for (std::size_t i = points; i-- > 0;)
        pts += fmt::format("{:.1f},{:.1f} ", px(plan.samples_at(i * plan.every)),
                           py(std::max(lo, s.summary->mean[i] - s.summary->std[i])));
      o += fmt::format(
          "<polygon points=\"{}\" fill=\"{}\" fill-opacity=\"0.12\" stroke=\"none\"/>\n", pts,
          s.colour);
    }
    std::string pts;
    for (std::size_t i = 0; i < points; ++i)
      pts += fmt::format("{:.1f},{:.1f} ", px(plan.samples_at(i * plan.every)),
                         py(s.summary->mean[i]));
    o += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:.1f}\"{}/>\n", pts,
        s.colour, s.width, s.dash.empty() ? "" : " stroke-dasharray=\"" + s.dash + "\"");
  }
  // legend, bottom right, as wide as its longest line (about 5.6 px a character at 10 px)
  std::size_t longest = 0;
  for (const auto& s : series)
    longest = std::max(longest, s.label.size() + legend_note(plan, s.summary).size());
  const double lx = x + ml + pw - 34 - 5.6 * static_cast<double>(longest);
  double ly = y + mt + ph - 8 - 14.0 * static_cast<double>(series.size() - 1);
  for (const auto& s : series) {
    o += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"{:.1f}\"{}/><text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\">{}{}</text>\n",
        lx, lx + 22, ly - 3, ly - 3, s.colour, s.width,
        s.dash.empty() ? "" : " stroke-dasharray=\"" + s.dash + "\"", lx + 26, ly,
        escape_html(s.label), legend_note(plan, s.summary));
    ly += 14;
  }
  o += "</g>\n";
  return o;
}

std::string figure_svg(const Plan& plan, const std::vector<Summary>& sums) {
  // The y range: every mean, with a margin, to whole 5 points.
  double lo = 1.0, hi = 0.0;
  for (const auto& s : sums) {
    for (std::size_t i = 0; i < s.mean.size(); ++i) {
      lo = std::min(lo, s.mean[i] - s.std[i]);
      hi = std::max(hi, s.mean[i] + s.std[i]);
    }
  }
  if (hi < lo) {
    lo = 0.0;
    hi = 1.0;
  }
  lo = std::max(0.0, std::floor(lo * 20.0) / 20.0);
  hi = std::min(1.0, std::ceil(hi * 20.0) / 20.0);
  if (hi - lo < 0.1) hi = std::min(1.0, lo + 0.1);

  std::vector<std::uint32_t> lags;
  for (const auto& s : plan.settings)
    if (s.lag > 0 && std::find(lags.begin(), lags.end(), s.lag) == lags.end())
      lags.push_back(s.lag);
  const double w = 460, h = 320;
  const std::size_t panels = 1 + lags.size();
  const std::size_t cols = panels == 1 ? 1 : 2;
  const std::size_t rows = (panels + cols - 1) / cols;
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\">\n<rect width=\"100%\" "
      "height=\"100%\" fill=\"white\"/>\n",
      w * cols, h * rows, w * cols, h * rows);
  // Panel 1: every setting; colour by correction, dash by lag.
  const char* dashes[] = {"", "7 3", "3 3", "10 3 2 3", "1 3", "12 4"};
  std::vector<Series> all;
  all.push_back({"sync (lag 0)", "#000000", "", 2.6, &sums[0], false});
  for (std::size_t k = 1; k < plan.settings.size(); ++k) {
    const auto& st = plan.settings[k];
    const std::size_t li =
        static_cast<std::size_t>(std::find(lags.begin(), lags.end(), st.lag) - lags.begin());
    all.push_back(
        {st.label, correction_colour(st.correction), dashes[li % 6], 1.4, &sums[k], false});
  }
  o += panel(plan, 0, 0, w, h, "held-out accuracy, every setting (mean over seeds)", all, lo, hi);
  for (std::size_t li = 0; li < lags.size(); ++li) {
    std::vector<Series> ss;
    ss.push_back({"sync (lag 0)", "#000000", "", 2.2, &sums[0], true});
    for (std::size_t k = 1; k < plan.settings.size(); ++k) {
      const auto& st = plan.settings[k];
      if (st.lag != lags[li]) continue;
      ss.push_back({st.correction, correction_colour(st.correction), "", 1.8, &sums[k], true});
    }
    const std::size_t p = li + 1;
    o += panel(plan, w * static_cast<double>(p % cols), h * static_cast<double>(p / cols), w, h,
               fmt::format("lag {} (band: ± std over seeds)", lags[li]), ss, lo, hi);
  }
  o += "</svg>\n";
  return o;
}

std::string html_page(const Plan& plan, const Table& t, const std::string& svg,
                      std::size_t finished, std::size_t total) {
  std::string o =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>sluice staleness "
      "study</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:1em auto;"
      "color:#222}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
      "padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}"
      "code{background:#f4f4f4}</style></head><body>\n<h1>Staleness study</h1>\n";
  o += "<p><code>" + escape_html(plan.command) + "</code> at commit <code>" +
       escape_html(plan.commit) +
       "</code>: " + fmt::format("{} of {} runs finished", finished, total) + ".</p>\n";
  o += fmt::format(
      "<p>Each run: the job's warm start (shared), then {} updates of {} trajectories ({} prompts "
      "x {} samples), held-out accuracy on {} prompts every {} updates. At lag k the batch of "
      "update u is generated by the weights of version max(0, u - k) and trained with the "
      "current weights as the proximal policy and the generator's log-probs as the behaviour "
      "log-probs. <b>The lag is exact here</b>: in a real job the rollouts are processes and "
      "the lag varies with timing; this isolates the learning effect of staleness from "
      "timing. A seed changes the training prompts and the sampling RNG, not the warm start; "
      "every setting of a seed sees the same prompts in the same order, so settings compare at "
      "equal samples. Accuracy: mean ± standard deviation over seeds (n - 1). Learner ms/step: "
      "Learner::train alone, on a shared machine, so compare them as ratios.</p>\n",
      plan.updates, plan.job.manager.batch_trajectories, plan.shape.per_update, plan.shape.group,
      plan.job.actor.learner.eval_prompts, plan.every);
  o += svg;
  o += "<table>\n<tr>";
  for (const auto& h : t.head)
    o += "<th>" + escape_html(h) + "</th>";
  o += "</tr>\n";
  for (const auto& row : t.rows) {
    o += "<tr>";
    for (const auto& c : row)
      o += "<td>" + escape_html(c) + "</td>";
    o += "</tr>\n";
  }
  o += "</table>\n<p>Corrections: <b>none</b>, the surrogate's ratio against the behaviour "
       "log-probs (no proximal, w = 1, the clip around the behaviour policy: naive asynchronous "
       "PPO); <b>behaviour-cap</b>, decoupled PPO (ratio against the proximal policy recomputed "
       "at the current version, w = exp(proximal - behaviour) capped at "
       "actor.learner.clip.behaviour_cap); <b>m2po</b>, M2PO's second-moment trust region (the "
       "tokens of largest (log w)^2 masked until the mean over the kept ones is at most "
       "actor.learner.m2po_threshold; kept tokens take w uncapped).</p>\n</body></html>\n";
  return o;
}

Json results_json(const Plan& plan, const std::vector<Run>& runs,
                  const std::vector<Summary>& sums) {
  Json j;
  j["command"] = plan.command;
  j["commit"] = plan.commit;
  j["job"] = plan.job.name;
  j["seeds"] = plan.seeds;
  j["updates"] = plan.updates;
  j["every"] = plan.every;
  j["trajectories_per_update"] = plan.job.manager.batch_trajectories;
  j["lags"] = plan.lags;
  j["corrections"] = plan.corrections;
  j["m2po_threshold"] = plan.job.actor.learner.m2po_threshold;
  j["behaviour_cap"] = plan.job.actor.learner.clip.behaviour_cap;
  std::vector<std::uint64_t> samples;
  for (std::size_t i = 0; i < plan.points(); ++i)
    samples.push_back(plan.samples_at(static_cast<std::uint32_t>(i * plan.every)));
  j["note"] =
      "the lag is exact here (update u is generated by version max(0, u - lag)); a real job's "
      "rollouts are processes, so this isolates the learning effect from timing";
  j["settings"] = Json::array();
  for (std::size_t k = 0; k < plan.settings.size(); ++k) {
    Json s;
    s["setting"] = plan.settings[k].label;
    s["lag"] = plan.settings[k].lag;
    s["correction"] = plan.settings[k].correction;
    s["seeds_done"] = sums[k].seeds;
    s["samples"] = samples;
    s["mean"] = sums[k].mean;
    s["std"] = sums[k].std;
    s["last3"] = sums[k].last3;
    s["learner_ms_per_step"] = sums[k].train_ms;
    s["masked_fraction"] = sums[k].masked;
    s["truncated_fraction"] = sums[k].truncated;
    s["behaviour_kl"] = sums[k].behaviour_kl;
    s["seconds_per_run"] = sums[k].seconds;
    j["settings"].push_back(s);
  }
  j["runs"] = Json::array();
  for (const auto& r : runs) {
    Json jr;
    jr["setting"] = plan.settings[r.setting].label;
    jr["lag"] = plan.settings[r.setting].lag;
    jr["correction"] = plan.settings[r.setting].correction;
    jr["seed"] = r.seed;
    jr["at"] = r.at;
    std::vector<std::uint64_t> s;
    for (auto a : r.at)
      s.push_back(plan.samples_at(a));
    jr["samples"] = s;
    jr["accuracy"] = r.accuracy;
    jr["generated_by"] = r.generated_by;
    jr["learner_ms_per_step"] = r.train_ms;
    jr["masked_fraction"] = r.masked_fraction;
    jr["truncated_fraction"] = r.truncated_fraction;
    jr["behaviour_kl"] = r.behaviour_kl;
    jr["clip_fraction"] = r.clip_fraction;
    jr["seconds"] = r.seconds;
    j["runs"].push_back(jr);
  }
  return j;
}

core::Status write_text(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return core::unavailable("cannot write " + tmp.string());
    f << text;
    if (!f.flush()) return core::unavailable("writing " + tmp.string() + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return core::unavailable("cannot rename " + tmp.string() + ": " + ec.message());
  return {};
}

core::Status write_outputs(const Plan& plan, const std::vector<Run>& runs, std::size_t total,
                           std::string* table_out) {
  std::vector<Summary> sums;
  for (std::size_t k = 0; k < plan.settings.size(); ++k)
    sums.push_back(summarize(runs, k, plan.points()));
  const Table t = make_table(plan, runs);
  const std::string md = markdown(t);
  if (table_out) *table_out = md;
  const std::string svg = figure_svg(plan, sums);
  SLUICE_TRY(write_text(plan.out / "results.json", results_json(plan, runs, sums).dump(1) + "\n"));
  SLUICE_TRY(
      write_text(plan.out / "study.md", "`" + plan.command + "` at " + plan.commit + "\n\n" + md));
  SLUICE_TRY(write_text(plan.out / "staleness.svg", svg));
  SLUICE_TRY(write_text(plan.out / "staleness.html", html_page(plan, t, svg, runs.size(), total)));
  return {};
}

// The runs of an earlier study's results.json, checked against this plan (the same settings,
// updates and evaluations).
core::Result<std::vector<Run>> read_runs(Plan& plan) {
  const std::string path = (plan.out / "results.json").string();
  SLUICE_ASSIGN_OR_RETURN(Json j, core::config::read_json_file(path));
  auto differs = [&](const std::string& what) {
    return core::invalid_argument(path + ": not the same " + what +
                                  " as this command's flags (give the study's own)");
  };
  try {
    if (j.at("updates").get<std::uint32_t>() != plan.updates) return differs("updates");
    plan.commit = j.at("commit").get<std::string>();  // the study's, not this binary's
    if (j.at("every").get<std::uint32_t>() != plan.every) return differs("--every");
    if (j.at("seeds").get<std::uint32_t>() != plan.seeds) return differs("seeds");
    const auto& settings = j.at("settings");
    if (settings.size() != plan.settings.size()) return differs("settings");
    for (std::size_t k = 0; k < settings.size(); ++k)
      if (settings[k].at("setting").get<std::string>() != plan.settings[k].label)
        return differs("settings");
    std::vector<Run> runs;
    for (const auto& jr : j.at("runs")) {
      Run r;
      const std::string label = jr.at("setting").get<std::string>();
      r.setting = plan.settings.size();
      for (std::size_t k = 0; k < plan.settings.size(); ++k)
        if (plan.settings[k].label == label) r.setting = k;
      if (r.setting == plan.settings.size()) return differs("settings (" + label + ")");
      r.seed = jr.at("seed").get<std::uint32_t>();
      r.at = jr.at("at").get<std::vector<std::uint32_t>>();
      r.accuracy = jr.at("accuracy").get<std::vector<double>>();
      if (r.accuracy.size() != plan.points()) return differs("evaluations");
      r.generated_by = jr.at("generated_by").get<std::vector<std::uint64_t>>();
      r.train_ms = jr.at("learner_ms_per_step").get<double>();
      r.masked_fraction = jr.at("masked_fraction").get<double>();
      r.truncated_fraction = jr.at("truncated_fraction").get<double>();
      r.behaviour_kl = jr.at("behaviour_kl").get<double>();
      r.clip_fraction = jr.at("clip_fraction").get<double>();
      r.seconds = jr.at("seconds").get<double>();
      runs.push_back(std::move(r));
    }
    return runs;
  } catch (const std::exception& e) {
    return core::invalid_argument(path + ": " + e.what());
  }
}

}  // namespace

int run_study_staleness(const StudyArgs& args) {
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "sluice study staleness: %s\n", what.c_str());
    return 2;
  };
  auto plan_or = make_plan(args);
  if (!plan_or.is_ok()) return fail(plan_or.status().message());
  Plan& plan = *plan_or;
  if (!args.replot.empty()) {
    auto runs = read_runs(plan);
    if (!runs.is_ok()) return fail(runs.status().message());
    std::string md;
    if (auto st = write_outputs(plan, *runs, plan.settings.size() * plan.seeds, &md); !st.is_ok())
      return fail(st.to_string());
    std::printf("%s\n\n%s", plan.command.c_str(), md.c_str());
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(plan.out, ec);
  if (ec) return fail("cannot create " + plan.out.string() + ": " + ec.message());

  model::set_blas_threads(1);  // as the actor runs
  auto scratch = ScratchDir::create("sluice-study");
  if (!scratch.is_ok()) return fail(scratch.status().to_string());
  WarmStarts warm_starts(scratch->path());
  // Every setting shares one warm start: the correction is not a warm-start setting.
  auto warm = warm_starts.checkpoint(plan.job.actor.learner, "study");
  if (!warm.is_ok()) return fail(warm.status().to_string());
  double warm_accuracy = 0.0;
  {
    auto l = actor::Learner::create(plan.job.actor.learner);
    if (!l.is_ok()) return fail(l.status().to_string());
    if (auto st = (*l)->load(*warm); !st.is_ok()) return fail(st.to_string());
    auto e = (*l)->evaluate();
    if (!e.is_ok()) return fail(e.status().to_string());
    warm_accuracy = e->accuracy;
  }
  const std::size_t total = plan.settings.size() * plan.seeds;
  std::fprintf(stderr,
               "study: warm start %.1f%% held-out; %zu settings x %u seeds = %zu runs of %u "
               "updates, into %s\n",
               100.0 * warm_accuracy, plan.settings.size(), plan.seeds, total, plan.updates,
               plan.out.c_str());
  // Seed by seed, so that a study stopped early has whole seeds of every setting; with --jobs N,
  // N runs at a time, each on its own thread with its own learners (the model keeps no state
  // between instances, and BLAS runs one thread per call).
  struct Task {
    std::uint32_t seed;
    std::size_t setting;
  };
  std::vector<Task> tasks;
  for (std::uint32_t seed = 0; seed < plan.seeds; ++seed)
    for (std::size_t k = 0; k < plan.settings.size(); ++k)
      tasks.push_back({seed, k});
  std::vector<Run> runs;
  std::mutex mu;
  std::atomic<std::size_t> next{0};
  std::string error;
  auto worker = [&] {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= tasks.size()) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!error.empty()) return;
      }
      const Task t = tasks[i];
      const std::string& label = plan.settings[t.setting].label;
      auto r = run_setting(plan, t.setting, t.seed, *warm, warm_accuracy);
      std::lock_guard<std::mutex> lock(mu);
      if (!r.is_ok()) {
        if (error.empty()) error = label + ": " + r.status().to_string();
        return;
      }
      std::fprintf(stderr,
                   "study: seed %u/%u, %s: done in %.1f s, end %.1f%%, learner %.1f ms/step "
                   "(%zu/%zu runs)\n",
                   t.seed + 1, plan.seeds, label.c_str(), r->seconds, 100.0 * r->accuracy.back(),
                   r->train_ms, runs.size() + 1, total);
      runs.push_back(std::move(*r));
      if (auto st = write_outputs(plan, runs, total, nullptr); !st.is_ok() && error.empty())
        error = st.to_string();
    }
  };
  {
    std::vector<std::thread> threads;
    const std::uint32_t n =
        std::min<std::uint32_t>(args.jobs, static_cast<std::uint32_t>(tasks.size()));
    for (std::uint32_t j = 1; j < n; ++j)
      threads.emplace_back(worker);
    worker();
    for (auto& th : threads)
      th.join();
  }
  if (!error.empty()) return fail(error);
  // Runs in task order (threads finish out of order).
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return a.seed != b.seed ? a.seed < b.seed : a.setting < b.setting;
  });
  std::string md;
  if (auto st = write_outputs(plan, runs, total, &md); !st.is_ok()) return fail(st.to_string());
  std::printf(
      "%s\n\n%u updates of %u trajectories per run, held-out accuracy (%%, mean ± std over %u "
      "seeds) at equal trained samples; the lag is exact (update u generated by version "
      "max(0, u - lag)):\n\n%s\nwritten: %s/{results.json,study.md,staleness.html,staleness.svg}\n",
      plan.command.c_str(), plan.updates, plan.job.manager.batch_trajectories, plan.seeds,
      md.c_str(), plan.out.c_str());
  return 0;
}

}  // namespace sluice::cli
