#include "analysis/report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace sluice::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- reading metrics.jsonl ----

struct Point {
  double t = 0;
  double v = 0;
};

// The series of one run. Each holds (t, value) pairs in file order.
struct Metrics {
  std::vector<Point> reward;
  std::vector<Point> accuracy;
  std::vector<Point> throughput;
  std::vector<Point> staleness;
  std::size_t used_lines = 0;
  std::size_t malformed = 0;
  std::vector<std::size_t> malformed_line_numbers;  // the first kListedMalformed, 1-based
  double t_min = 0;
  double t_max = 0;
  std::string mode;  // of the last line that names one
  std::optional<double> last_step;
  std::optional<double> last_version;
};

constexpr std::size_t kListedMalformed = 10;

// The finite number under `key`, nullopt when absent or null; false when present with another
// type (or not finite).
bool read_number(const json& line, std::string_view key, std::optional<double>* out) {
  *out = std::nullopt;
  auto it = line.find(key);
  if (it == line.end() || it->is_null()) return true;
  if (!it->is_number()) return false;
  double v = it->get<double>();
  if (!std::isfinite(v)) return false;
  *out = v;
  return true;
}

// Parses one non-blank line into `m`; false when the line is malformed (nothing is added then).
bool add_line(std::string_view text, Metrics& m) {
  json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (line.is_discarded() || !line.is_object()) return false;
  std::optional<double> t;
  if (!read_number(line, "t", &t) || !t) return false;
  // Every known numeric field is type-checked, plotted or not, so a wrong writer shows up.
  std::optional<double> step, version, reward, accuracy, tokens_per_s, staleness, stall, loss;
  const std::pair<std::string_view, std::optional<double>*> fields[] = {
      {"step", &step},
      {"version", &version},
      {"reward_mean", &reward},
      {"accuracy", &accuracy},
      {"tokens_per_s", &tokens_per_s},
      {"staleness_mean", &staleness},
      {"weight_stall_frac", &stall},
      {"loss", &loss}};
  for (const auto& [key, out] : fields) {
    if (!read_number(line, key, out)) return false;
  }
  auto mode = line.find("mode");
  if (mode != line.end() && !mode->is_null() && !mode->is_string()) return false;

  auto add = [&](std::vector<Point>& series, const std::optional<double>& v) {
    if (v) series.push_back({*t, *v});
  };
  add(m.reward, reward);
  add(m.accuracy, accuracy);
  add(m.throughput, tokens_per_s);
  add(m.staleness, staleness);
  if (m.used_lines == 0) {
    m.t_min = m.t_max = *t;
  } else {
    m.t_min = std::min(m.t_min, *t);
    m.t_max = std::max(m.t_max, *t);
  }
  if (mode != line.end() && mode->is_string()) m.mode = mode->get<std::string>();
  if (step) m.last_step = step;
  if (version) m.last_version = version;
  ++m.used_lines;
  return true;
}

core::Result<Metrics> read_metrics(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return core::not_found(
        fmt::format("no metrics file {} (did the job's actor run?)", path.string()));
  }
  if (!fs::is_regular_file(path, ec)) {
    return core::invalid_argument(fmt::format("{} is not a regular file", path.string()));
  }
  std::ifstream in(path);
  if (!in) return core::not_found(fmt::format("cannot open {}", path.string()));
  Metrics m;
  std::string text;
  std::size_t number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    if (!add_line(text, m)) {
      ++m.malformed;
      if (m.malformed_line_numbers.size() < kListedMalformed) {
        m.malformed_line_numbers.push_back(number);
      }
    }
  }
  if (in.bad()) return core::internal_error(fmt::format("reading {} failed", path.string()));
  if (m.used_lines == 0) {
    return core::invalid_argument(
        m.malformed == 0
            ? fmt::format("metrics file {} is empty: no step was recorded", path.string())
            : fmt::format("metrics file {} has no usable line ({} malformed)", path.string(),
                          m.malformed));
  }
  return m;
}

// ---- HTML and SVG ----

// An axis range [lo, hi] cut into ticks `step` apart, with lo and hi on ticks.
struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 0.2;
};

// 1, 2 or 5 times a power of ten, so that [min, max] gets about `ticks` intervals.
Axis nice_axis(double min, double max, int ticks) {
  if (!(max > min)) {
    double pad = min == 0 ? 1 : std::abs(min) * 0.1;
    min -= pad;
    max += pad;
  }
  double raw = (max - min) / ticks;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  double frac = raw / power;
  double nice = frac <= 1 ? 1 : frac <= 2 ? 2 : frac <= 5 ? 5 : 10;
  Axis a;
  a.step = nice * power;
  // The small tolerances keep a value that is a tick up to rounding from adding an interval.
  a.lo = std::floor(min / a.step + 1e-9) * a.step;
  a.hi = std::ceil(max / a.step - 1e-9) * a.step;
  if (a.hi <= a.lo) a.hi = a.lo + a.step;
  return a;
}

// Ticks print with as many decimals as their spacing needs (0.25 -> 2, 500 -> 0).
std::string tick_label(double v, double step) {
  int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  decimals = std::clamp(decimals, 0, 9);
  if (std::abs(v) < step * 1e-6) v = 0;  // no "-0"
  return fmt::format("{:.{}f}", v, decimals);
}

// Geometry of every plot, in SVG user units.
constexpr double kWidth = 560;
constexpr double kHeight = 320;
constexpr double kLeft = 72;
constexpr double kRight = 20;
constexpr double kTop = 40;
constexpr double kBottom = 48;
constexpr double kPlotW = kWidth - kLeft - kRight;
constexpr double kPlotH = kHeight - kTop - kBottom;
constexpr std::size_t kMaxMarkers = 120;  // above this many points only the line is drawn

struct PlotSpec {
  std::string_view id;
  std::string_view title;
  std::string_view y_label;
  std::string_view color;
  bool from_zero = false;  // the quantity is never negative: start the y axis at 0
  const std::vector<Point>* points = nullptr;
};

std::string render_plot(const PlotSpec& p, const Axis& x) {
  const std::vector<Point>& pts = *p.points;
  Axis y;
  if (!pts.empty()) {
    auto [lo, hi] = std::minmax_element(pts.begin(), pts.end(),
                                        [](const Point& a, const Point& b) { return a.v < b.v; });
    double ymin = lo->v;
    double ymax = hi->v;
    if (p.from_zero) ymin = std::min(ymin, 0.0);
    if (p.from_zero && ymax <= 0) ymax = std::max(ymax, 1.0);
    y = nice_axis(ymin, ymax, 5);
  }
  auto px = [&](double t) { return kLeft + (t - x.lo) / (x.hi - x.lo) * kPlotW; };
  auto py = [&](double v) { return kTop + kPlotH - (v - y.lo) / (y.hi - y.lo) * kPlotH; };

  std::string s = fmt::format(
      "<svg class=\"plot\" id=\"plot-{id}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" "
      "role=\"img\" aria-label=\"{title}\">\n<title>{title}</title>\n"
      "<text class=\"plot-title\" x=\"{cx}\" y=\"22\" text-anchor=\"middle\">{title}</text>\n"
      "<rect class=\"plot-area\" x=\"{x}\" y=\"{y}\" width=\"{pw}\" height=\"{ph}\"/>\n",
      fmt::arg("id", p.id), fmt::arg("w", kWidth), fmt::arg("h", kHeight),
      fmt::arg("title", escape_html(p.title)), fmt::arg("cx", kLeft + kPlotW / 2),
      fmt::arg("x", kLeft), fmt::arg("y", kTop), fmt::arg("pw", kPlotW), fmt::arg("ph", kPlotH));

  // Ticks, grid lines and labels. Positions are computed from the tick index so that rounding
  // does not add or drop the last tick.
  auto count = [](const Axis& a) { return static_cast<int>(std::lround((a.hi - a.lo) / a.step)); };
  auto each_tick = [&](const Axis& a, auto&& draw) {
    for (int i = 0, n = count(a); i <= n; ++i)
      draw(a.lo + i * a.step);
  };
  each_tick(x, [&](double v) {
    s += fmt::format(
        "<line class=\"grid\" x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\"/>"
        "<text class=\"tick x-tick\" x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(v), kTop, kTop + kPlotH + 5, kTop + kPlotH + 18, tick_label(v, x.step));
  });
  each_tick(y, [&](double v) {
    s += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" y1=\"{2:.2f}\" x2=\"{1}\" y2=\"{2:.2f}\"/>"
        "<text class=\"tick y-tick\" x=\"{3}\" y=\"{4:.2f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft - 5, kLeft + kPlotW, py(v), kLeft - 8, py(v) + 4, tick_label(v, y.step));
  });
  s += fmt::format(
      "<text class=\"axis-label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">t (s)</text>\n"
      "<text class=\"axis-label\" transform=\"translate(16 {}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      kLeft + kPlotW / 2, kHeight - 10, kTop + kPlotH / 2, escape_html(p.y_label));

  if (pts.empty()) {
    s += fmt::format(
        "<text class=\"no-data\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n",
        kLeft + kPlotW / 2, kTop + kPlotH / 2);
  } else {
    if (pts.size() > 1) {
      s += fmt::format("<polyline class=\"series\" fill=\"none\" stroke=\"{}\" points=\"", p.color);
      for (std::size_t i = 0; i < pts.size(); ++i) {
        s += fmt::format("{}{:.2f},{:.2f}", i ? " " : "", px(pts[i].t), py(pts[i].v));
      }
      s += "\"/>\n";
    }
    if (pts.size() <= kMaxMarkers) {
      for (const Point& q : pts) {
        s +=
            fmt::format("<circle class=\"point\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"/>",
                        px(q.t), py(q.v), p.color);
      }
      s += "\n";
    }
  }
  s += "</svg>\n";
  return s;
}

// ---- summary.json ----

std::string scalar_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.6g}", v.get<double>());
  return v.dump();  // integers, booleans, null
}

// Flattens the scalars of a summary into (dotted key, value) rows. Short arrays of scalars are
// joined; longer arrays and arrays of objects are summarised by their length.
void flatten(const json& j, const std::string& prefix, int depth,
             std::vector<std::pair<std::string, std::string>>& rows) {
  constexpr std::size_t kMaxRows = 400;
  constexpr std::size_t kMaxJoined = 8;
  if (rows.size() >= kMaxRows) return;
  if (j.is_object()) {
    if (depth >= 4) {
      rows.emplace_back(prefix, fmt::format("{} fields", j.size()));
      return;
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), depth + 1, rows);
    }
  } else if (j.is_array()) {
    bool scalars = std::all_of(j.begin(), j.end(),
                               [](const json& e) { return !e.is_object() && !e.is_array(); });
    if (scalars && j.size() <= kMaxJoined) {
      std::string joined;
      for (const json& e : j)
        joined += (joined.empty() ? "" : ", ") + scalar_text(e);
      rows.emplace_back(prefix, j.empty() ? "(none)" : joined);
    } else {
      rows.emplace_back(prefix, fmt::format("{} {}", j.size(), scalars ? "items" : "entries"));
    }
  } else {
    rows.emplace_back(prefix, scalar_text(j));
  }
}

// A JSON file of the run folder: null when absent, discarded when not JSON.
json read_json(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  std::ifstream in(path);
  return json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::string render_summary(json doc) {
  if (doc.is_null()) {
    return "<p class=\"note\">No summary.json in this run folder (the job has not finished, or "
           "stopped before writing one).</p>\n";
  }
  if (doc.is_discarded() || !doc.is_object()) {
    // The plots are still worth having; say what is wrong instead of failing the report.
    return "<p class=\"note warning\">summary.json is not a JSON object; its figures are not "
           "shown.</p>\n";
  }
  std::string s;
  if (auto ev = doc.find("events"); ev != doc.end() && ev->is_array() && !ev->empty()) {
    s += "<h3>Events</h3>\n<ul class=\"events\">\n";
    for (const json& e : *ev)
      s += "<li>" + escape_html(scalar_text(e)) + "</li>\n";
    s += "</ul>\n";
    doc.erase("events");
  }
  std::vector<std::pair<std::string, std::string>> rows;
  flatten(doc, "", 0, rows);
  s += fmt::format(
      "<details class=\"all-figures\"><summary>All {} figures of summary.json</summary>\n",
      rows.size());
  s +=
      "<table class=\"summary\">\n<thead><tr><th>figure</th><th>value</th></tr></thead>\n<tbody>\n";
  for (const auto& [key, value] : rows) {
    s += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", escape_html(key), escape_html(value));
  }
  s += "</tbody>\n</table>\n</details>\n";
  return s;
}

// ---- the headline ----

// The figures a reader looks for first, taken from summary.json (and the run folder's job.json
// for the trajectories the job meant to make). Absent figures say so rather than show 0.
struct Headline {
  std::optional<double> accuracy_before, accuracy_after;  // held-out, fractions
  std::optional<double> tokens_per_s;                     // the actor's trained tokens per second
  // Rollout time spent loading weights or waiting at a version barrier, of their wall time.
  std::optional<double> weight_stall_frac;
  // Exactly-once: no trajectory consumed twice and, for a job that ran to its end, none lost.
  // nullopt: the actor's id lists are missing or incomplete, so it cannot be checked.
  std::optional<bool> once;
  std::uint64_t consumed = 0, twice = 0, lost = 0, expected = 0;
  // Slot time (rollout wall time x decode slots), by where it went, in slot-seconds.
  double slot_s = 0;
  std::vector<std::pair<std::string, double>> slots;  // (label, slot-seconds), in drawing order
};

double number_at(const json& j, std::string_view key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::uint64_t twice_in(const json& ids) {
  std::vector<std::string> v;
  for (const json& id : ids)
    v.push_back(id.is_string() ? id.get<std::string>() : id.dump());
  std::sort(v.begin(), v.end());
  return static_cast<std::uint64_t>(
      v.size() - static_cast<std::size_t>(std::unique(v.begin(), v.end()) - v.begin()));
}

// The manager's free_slot_s causes (rollout/manager.hpp, kFreeSlotCauses) as a reader names them.
constexpr std::pair<std::string_view, std::string_view> kSlotCauses[] = {
    {"environment", "waiting on the environment"},
    {"loading", "waiting for weights"},
    {"draining", "draining an old version"},
    {"budget", "parked by the in-flight budget"},
    {"backlog", "paused by the actor's backlog"},
    {"end", "no work left (the job's end)"},
    {"other", "idle, other"},
};

Headline make_headline(const json& summary, const json& job) {
  Headline h;
  const json empty = json::object();
  auto object_at = [&](const json& j, const char* key) -> const json& {
    auto it = j.find(key);
    return it != j.end() && it->is_object() ? *it : empty;
  };
  const json& actor = object_at(summary, "actor");
  const json& manager = object_at(summary, "manager");
  // The actor writes -1 for an accuracy it did not measure.
  if (double a = number_at(actor, "initial_accuracy"); actor.contains("initial_accuracy") && a >= 0)
    h.accuracy_before = a;
  if (double a = number_at(actor, "final_accuracy"); actor.contains("final_accuracy") && a >= 0)
    h.accuracy_after = a;
  if (actor.contains("tokens_per_s")) h.tokens_per_s = number_at(actor, "tokens_per_s");

  double wall = 0, stall = 0;
  auto rollouts = manager.find("rollouts");
  if (rollouts != manager.end() && rollouts->is_array()) {
    for (const json& r : *rollouts) {
      if (!r.is_object()) continue;
      const json& st = object_at(r, "stats");
      const double slots = number_at(st, "max_sequences");
      wall += number_at(st, "wall_s");
      stall += number_at(st, "load_s") + number_at(st, "barrier_s");
      h.slot_s += number_at(st, "wall_s") * slots;
    }
  }
  if (wall > 0) h.weight_stall_frac = stall / wall;
  if (h.slot_s > 0) {
    // A rollout's wall time counts from its first weights, and from then on the manager samples
    // every slot that holds no sequence, by cause; the rest held one. (The engine's own
    // occupancy_s misses the model engine's compute time, so it is not used here.)
    const json& free = object_at(manager, "free_slot_s");
    double idle = 0;
    for (const auto& [key, label] : kSlotCauses) {
      idle += number_at(free, key);
      h.slots.emplace_back(std::string(label), number_at(free, key));
    }
    h.slots.insert(h.slots.begin(),
                   {"generating (holding a sequence)", std::max(0.0, h.slot_s - idle)});
  }

  auto accepted = actor.find("accepted_ids");
  auto trained = actor.find("trained_ids");
  auto complete = actor.find("ids_complete");
  if (accepted != actor.end() && accepted->is_array() && complete != actor.end() &&
      *complete == true) {
    h.twice = twice_in(*accepted);
    if (trained != actor.end() && trained->is_array()) h.twice += twice_in(*trained);
    h.consumed = accepted->size() - twice_in(*accepted);
    // A job that ran to its end (not stopped by duration_s) consumed every trajectory it made.
    const json& m = object_at(job, "manager");
    const bool to_end = summary.contains("outcome") && summary["outcome"] == "ok" &&
                        number_at(job, "duration_s") == 0;
    h.expected = static_cast<std::uint64_t>(number_at(m, "prompts") * number_at(m, "group_size"));
    if (to_end && h.expected > h.consumed) h.lost = h.expected - h.consumed;
    h.once = h.twice == 0 && h.lost == 0;
  }
  return h;
}

// Where slot time went, as one stacked bar with a legend beneath.
std::string render_slot_bar(const Headline& h) {
  constexpr double kBarW = 640, kBarH = 28, kRow = 18;
  const char* colors[] = {"#2ca02c", "#d62728", "#ff7f0e", "#1f77b4",
                          "#9467bd", "#8c564b", "#7f7f7f"};
  const double height = kBarH + 16 + kRow * static_cast<double>(h.slots.size());
  // The parts add up to slot_s, or to more when the manager's samples overshoot it a little.
  double drawn = 0;
  for (const auto& part : h.slots)
    drawn += part.second;
  std::string s = fmt::format(
      "<svg class=\"slots\" id=\"slot-time\" width=\"{w}\" height=\"{h:.0f}\" viewBox=\"0 0 {w} "
      "{h:.0f}\" role=\"img\" aria-label=\"where slot time went\">\n<title>Where slot time "
      "went</title>\n",
      fmt::arg("w", kBarW), fmt::arg("h", height));
  double x = 0;
  for (std::size_t i = 0; i < h.slots.size(); ++i) {
    const auto& [label, v] = h.slots[i];
    const double w = v / drawn * kBarW;
    const char* color = colors[i % std::size(colors)];
    s += fmt::format(
        "<rect class=\"slot\" data-cause=\"{}\" data-slot-s=\"{}\" x=\"{:.2f}\" y=\"0\" "
        "width=\"{:.2f}\" height=\"{}\" fill=\"{}\"/>\n",
        escape_html(label), v, x, w, kBarH, color);
    x += w;
    const double y = kBarH + 16 + kRow * static_cast<double>(i);
    s += fmt::format(
        "<rect x=\"0\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
        "<text class=\"legend\" x=\"18\" y=\"{:.0f}\">{}: {:.0f} slot-s ({:.1f}%)</text>\n",
        y - 10, color, y, escape_html(label), v, 100.0 * v / drawn);
  }
  s += "</svg>\n";
  return s;
}

std::string render_headline(const json& summary, const json& job) {
  if (!summary.is_object()) return "";
  const Headline h = make_headline(summary, job);
  const std::string missing = "<span class=\"note\">not in the summary</span>";
  std::string s = "<dl class=\"headline\">\n";

  s += "<dt>Held-out accuracy</dt>";
  if (h.accuracy_before && h.accuracy_after) {
    s += fmt::format(
        "<dd id=\"headline-accuracy\" data-before=\"{}\" data-after=\"{}\"><b>{:+.1f} "
        "points</b>: {:.1f}% after the warm start, {:.1f}% at the end</dd>\n",
        *h.accuracy_before, *h.accuracy_after, 100 * (*h.accuracy_after - *h.accuracy_before),
        100 * *h.accuracy_before, 100 * *h.accuracy_after);
  } else {
    s += "<dd id=\"headline-accuracy\"><span class=\"note\">not measured</span></dd>\n";
  }

  s += "<dt>Throughput</dt>";
  s += h.tokens_per_s ? fmt::format(
                            "<dd id=\"headline-throughput\" data-value=\"{}\"><b>{:.0f} "
                            "tokens/s</b> trained</dd>\n",
                            *h.tokens_per_s, *h.tokens_per_s)
                      : "<dd id=\"headline-throughput\">" + missing + "</dd>\n";

  s += "<dt>Weight stall</dt>";
  s += h.weight_stall_frac
           ? fmt::format(
                 "<dd id=\"headline-stall\" data-value=\"{}\"><b>{:.2f}%</b> of rollout "
                 "time loading weights or waiting at a version barrier</dd>\n",
                 *h.weight_stall_frac, 100 * *h.weight_stall_frac)
           : "<dd id=\"headline-stall\">" + missing + "</dd>\n";

  s += "<dt>Exactly-once</dt>";
  if (!h.once) {
    s += "<dd id=\"headline-once\" data-held=\"unknown\"><span class=\"note\">not checked: the "
         "actor's id lists are missing or incomplete</span></dd>\n";
  } else {
    s += fmt::format(
        "<dd id=\"headline-once\" data-held=\"{}\" data-consumed=\"{}\" data-twice=\"{}\" "
        "data-lost=\"{}\"{}><b>{}</b>: {} trajectories consumed, {} twice, {} lost{}</dd>\n",
        *h.once ? "true" : "false", h.consumed, h.twice, h.lost,
        *h.once ? "" : " class=\"warning\"", *h.once ? "held" : "FAILED", h.consumed, h.twice,
        h.lost, h.expected > 0 ? fmt::format(" (the job made {})", h.expected) : "");
  }
  s += "</dl>\n";

  if (h.slot_s > 0) {
    s += fmt::format(
        "<p class=\"slot-total\" data-slot-s=\"{}\">Where the rollouts' slot time went ({:.0f} "
        "slot-seconds: wall time x decode slots):</p>\n",
        h.slot_s, h.slot_s);
    s += render_slot_bar(h);
  }
  return s;
}

constexpr std::string_view kStyle = R"(
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; }
.meta { color: #555; margin-top: 0; }
.warning { color: #a33; }
.plots { display: grid; grid-template-columns: repeat(2, 560px); gap: 16px; }
svg.plot { background: #fafafa; border: 1px solid #ddd; }
.plot-area { fill: #fff; stroke: #888; }
.grid { stroke: #e4e4e4; }
.tick { font-size: 11px; fill: #444; }
.axis-label { font-size: 12px; fill: #333; }
.plot-title { font-size: 14px; font-weight: bold; fill: #222; }
.no-data { font-size: 14px; fill: #999; }
polyline.series { stroke-width: 2; }
table.summary { border-collapse: collapse; margin-top: 8px; }
table.summary td, table.summary th { border: 1px solid #ccc; padding: 3px 10px; text-align: left; }
table.summary td:nth-child(2) { font-family: monospace; }
dl.headline { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; }
dl.headline dt { font-weight: bold; }
dl.headline dd { margin: 0; }
.legend { font-size: 12px; fill: #333; }
)";

std::string render_page(const Metrics& m, const std::string& title, const fs::path& run_dir) {
  // t counts seconds since the start, so the time axis starts at 0 (and is never empty).
  double t_lo = std::min(0.0, m.t_min);
  Axis x = nice_axis(t_lo, m.t_max > t_lo ? m.t_max : t_lo + 1, 8);
  const PlotSpec plots[] = {
      {"reward", "Reward (mean per step)", "reward", "#1f77b4", false, &m.reward},
      {"accuracy", "Held-out accuracy", "accuracy", "#2ca02c", false, &m.accuracy},
      {"throughput", "Throughput (tokens/s)", "tokens/s", "#d62728", true, &m.throughput},
      {"staleness", "Staleness (mean versions behind)", "versions", "#9467bd", true, &m.staleness},
  };

  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  s += "<title>" + escape_html(title) + "</title>\n<style>" + std::string(kStyle) +
       "</style>\n</head>\n<body>\n";
  s += "<h1>" + escape_html(title) + "</h1>\n";
  std::string meta = fmt::format("{} metrics lines over {:.1f} s", m.used_lines, m.t_max - m.t_min);
  if (!m.mode.empty()) meta += ", mode " + m.mode;
  if (m.last_step) meta += fmt::format(", last step {:.0f}", *m.last_step);
  if (m.last_version) meta += fmt::format(", version {:.0f}", *m.last_version);
  s += "<p class=\"meta\">" + escape_html(meta) + " &mdash; from " +
       escape_html((run_dir / "metrics.jsonl").string()) + "</p>\n";
  if (m.malformed > 0) {
    std::string where;
    for (std::size_t n : m.malformed_line_numbers)
      where += (where.empty() ? "" : ", ") + std::to_string(n);
    if (m.malformed > m.malformed_line_numbers.size()) where += ", ...";
    s += fmt::format(
        "<p class=\"malformed warning\" data-count=\"{0}\">{0} malformed line{1} skipped "
        "(line{1} {2}).</p>\n",
        m.malformed, m.malformed == 1 ? "" : "s", where);
  } else {
    s += "<p class=\"malformed\" data-count=\"0\">No malformed lines.</p>\n";
  }
  const json summary = read_json(run_dir / "summary.json");
  if (summary.is_object()) {
    json job = read_json(run_dir / "job.json");
    s += "<h2>Headline</h2>\n" + render_headline(summary, job.is_object() ? job : json::object());
  }
  s += "<h2>Over time</h2>\n<div class=\"plots\">\n";
  for (const PlotSpec& p : plots)
    s += render_plot(p, x);
  s += "</div>\n<h2>Summary</h2>\n";
  s += render_summary(summary);
  s += "</body>\n</html>\n";
  return s;
}

}  // namespace

std::string escape_html(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

core::Status write_report(const std::string& run_dir, const std::string& title) {
  fs::path dir(run_dir);
  SLUICE_ASSIGN_OR_RETURN(Metrics m, read_metrics(dir / "metrics.jsonl"));
  std::string page = render_page(m, title, dir);

  // Write beside the target and rename, so that a browser never sees half a page.
  fs::path out = dir / "report.html";
  fs::path tmp = dir / "report.html.tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << page;
    f.close();
    if (!f) return core::internal_error(fmt::format("cannot write {}", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, out, ec);
  if (ec) {
    std::string why = ec.message();
    fs::remove(tmp, ec);  // best effort; the rename error is the one to report
    return core::internal_error(fmt::format("cannot write {}: {}", out.string(), why));
  }
  return core::Status::ok();
}

}  // namespace sluice::cli
