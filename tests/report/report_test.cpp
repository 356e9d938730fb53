#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "analysis/report.hpp"

using sluice::cli::write_report;
using sluice::core::Code;
namespace fs = std::filesystem;

namespace {

// A fresh folder, removed afterwards. With SLUICE_REPORT_KEEP set, the folder is that path and
// is kept, so that ctest's browser check can open the report this test generated.
class RunDir {
 public:
  explicit RunDir(bool keepable = false) {
    const char* keep = keepable ? std::getenv("SLUICE_REPORT_KEEP") : nullptr;
    if (keep != nullptr && *keep != '\0') {
      path_ = keep;
      keep_ = true;
      fs::remove_all(path_);
    } else {
      static std::atomic<int> counter{0};
      path_ = fs::temp_directory_path() /
              ("sluice-report-test-" + std::to_string(getpid()) + "-" + std::to_string(++counter));
    }
    fs::create_directories(path_);
  }
  ~RunDir() {
    std::error_code ec;
    if (!keep_) fs::remove_all(path_, ec);
  }
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(path_ / name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  fs::path path_;
  bool keep_ = false;
};

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1))
    ++n;
  return n;
}

// The <svg ...>...</svg> elements of a page, in order.
std::vector<std::string> svgs(const std::string& html) {
  std::vector<std::string> out;
  for (auto pos = html.find("<svg"); pos != std::string::npos; pos = html.find("<svg", pos + 1)) {
    auto end = html.find("</svg>", pos);
    REQUIRE(end != std::string::npos);
    out.push_back(html.substr(pos, end - pos));
  }
  return out;
}

// The value of attribute `name` in the first tag that starts with `tag_start`.
std::string attr(const std::string& text, const std::string& tag_start, const std::string& name,
                 std::size_t from = 0) {
  auto tag = text.find(tag_start, from);
  if (tag == std::string::npos) return "";
  auto close = text.find('>', tag);
  auto pos = text.find(" " + name + "=\"", tag);
  if (pos == std::string::npos || pos > close) return "";
  pos += name.size() + 3;
  return text.substr(pos, text.find('"', pos) - pos);
}

struct Pt {
  double x = 0;
  double y = 0;
};
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool holds(const Pt& p) const { return p.x >= x0 && p.x <= x1 && p.y >= y0 && p.y <= y1; }
};

Box plot_area(const std::string& svg) {
  const std::string tag = "<rect class=\"plot-area\"";
  REQUIRE(svg.find(tag) != std::string::npos);
  double x = std::stod(attr(svg, tag, "x")), y = std::stod(attr(svg, tag, "y"));
  return {x, y, x + std::stod(attr(svg, tag, "width")), y + std::stod(attr(svg, tag, "height"))};
}

std::vector<Pt> polyline(const std::string& svg) {
  std::vector<Pt> out;
  std::istringstream in(attr(svg, "<polyline", "points"));
  std::string pair;
  while (in >> pair) {
    auto comma = pair.find(',');
    REQUIRE(comma != std::string::npos);
    out.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
  }
  return out;
}

std::vector<Pt> circles(const std::string& svg) {
  std::vector<Pt> out;
  for (auto pos = svg.find("<circle"); pos != std::string::npos;
       pos = svg.find("<circle", pos + 1)) {
    out.push_back(
        {std::stod(attr(svg, "<circle", "cx", pos)), std::stod(attr(svg, "<circle", "cy", pos))});
  }
  return out;
}

// The numbers of the tick labels of one axis ("x-tick" or "y-tick"), in document order.
std::vector<double> ticks(const std::string& svg, const std::string& cls) {
  std::vector<double> out;
  const std::string open = "class=\"tick " + cls + "\"";
  for (auto pos = svg.find(open); pos != std::string::npos; pos = svg.find(open, pos + 1)) {
    auto text = svg.find('>', pos) + 1;
    out.push_back(std::stod(svg.substr(text, svg.find('<', text) - text)));
  }
  return out;
}

std::size_t top_most(const std::vector<Pt>& pts) {
  return static_cast<std::size_t>(
      std::min_element(pts.begin(), pts.end(), [](const Pt& a, const Pt& b) { return a.y < b.y; }) -
      pts.begin());
}

// Twenty steps: reward rising with one peak at step 13, accuracy on every fifth step, rising
// throughput, staleness cycling 0, 0.5, 1.
struct Synthetic {
  std::string text;
  std::vector<double> reward;
  std::vector<double> accuracy;
  std::vector<double> throughput;
  std::vector<double> staleness;
};

Synthetic synthetic() {
  Synthetic s;
  const double acc[] = {0.2, 0.4, 0.5, 0.7};
  for (int i = 0; i < 20; ++i) {
    double reward = i == 13 ? 0.95 : 0.1 + 0.04 * i;
    double tps = 1000 + 50 * i;
    double stale = (i % 3) * 0.5;
    std::string line =
        "{\"t\": " + std::to_string(1.0 + 0.5 * i) + ", \"step\": " + std::to_string(i + 1) +
        ", \"version\": " + std::to_string(i) + ", \"reward_mean\": " + std::to_string(reward) +
        ", \"tokens_per_s\": " + std::to_string(tps) +
        ", \"staleness_mean\": " + std::to_string(stale) +
        ", \"weight_stall_frac\": 0.01, \"loss\": -0.3, \"mode\": \"sluice\"";
    s.reward.push_back(reward);
    s.throughput.push_back(tps);
    s.staleness.push_back(stale);
    if (i % 5 == 4) {
      line += ", \"accuracy\": " + std::to_string(acc[i / 5]);
      s.accuracy.push_back(acc[i / 5]);
    }
    s.text += line + "}\n";
  }
  return s;
}

}  // namespace

TEST_SUITE("report") {
  TEST_CASE("a report has four plots whose points lie in the plot area and follow the data") {
    RunDir dir(/*keepable=*/true);
    Synthetic data = synthetic();
    dir.write("metrics.jsonl", data.text);
    REQUIRE(write_report(dir.path().string(), "job one").is_ok());
    REQUIRE(fs::exists(dir.path() / "report.html"));
    CHECK_FALSE(fs::exists(dir.path() / "report.html.tmp"));
    std::string html = dir.read("report.html");
    CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
    CHECK(html.find("No malformed lines") != std::string::npos);

    auto plots = svgs(html);
    REQUIRE(plots.size() == 4);
    const std::pair<const char*, const std::vector<double>*> expected[] = {
        {"reward", &data.reward},
        {"accuracy", &data.accuracy},
        {"throughput", &data.throughput},
        {"staleness", &data.staleness}};
    for (std::size_t k = 0; k < 4; ++k) {
      CAPTURE(k);
      const std::string& svg = plots[k];
      const std::vector<double>& values = *expected[k].second;
      CHECK(svg.find(std::string("id=\"plot-") + expected[k].first + "\"") != std::string::npos);
      CHECK(svg.find("<title>") != std::string::npos);
      Box box = plot_area(svg);
      auto line = polyline(svg);
      REQUIRE(line.size() == values.size());
      CHECK(circles(svg).size() == values.size());
      for (const Pt& p : line)
        CHECK(box.holds(p));
      for (std::size_t i = 1; i < line.size(); ++i)
        CHECK(line[i].x > line[i - 1].x);
      // The largest value is drawn highest (smallest SVG y), the smallest lowest.
      std::size_t vmax =
          static_cast<std::size_t>(std::max_element(values.begin(), values.end()) - values.begin());
      CHECK(line[top_most(line)].y == doctest::Approx(line[vmax].y));
      std::size_t vmin =
          static_cast<std::size_t>(std::min_element(values.begin(), values.end()) - values.begin());
      for (const Pt& p : line)
        CHECK(p.y <= line[vmin].y + 1e-9);
      // The y ticks are ascending and span the data; the x ticks span t.
      auto y = ticks(svg, "y-tick");
      REQUIRE(y.size() >= 2);
      CHECK(std::is_sorted(y.begin(), y.end()));
      CHECK(y.front() <= *std::min_element(values.begin(), values.end()));
      CHECK(y.back() >= *std::max_element(values.begin(), values.end()));
      auto x = ticks(svg, "x-tick");
      REQUIRE(x.size() >= 2);
      CHECK(x.front() <= 1.0);
      CHECK(x.back() >= 10.5);
    }
    // One time axis for all: the last step's x is the same in every plot.
    CHECK(polyline(plots[0]).back().x == doctest::Approx(polyline(plots[2]).back().x));
    CHECK(polyline(plots[1]).back().x == doctest::Approx(polyline(plots[0]).back().x));
    CHECK(polyline(plots[1]).front().x == doctest::Approx(polyline(plots[0])[4].x));
  }

  TEST_CASE("the page is self-contained and escapes the title") {
    RunDir dir;
    dir.write("metrics.jsonl", synthetic().text);
    const std::string title = "<script>alert(\"x\")</script> & 'co'";
    REQUIRE(write_report(dir.path().string(), title).is_ok());
    std::string html = dir.read("report.html");
    CHECK(html.find("http://") == std::string::npos);
    CHECK(html.find("https://") == std::string::npos);
    CHECK(html.find("<script") == std::string::npos);
    CHECK(html.find("<link") == std::string::npos);
    CHECK(html.find("<img") == std::string::npos);
    CHECK(html.find("url(") == std::string::npos);
    CHECK(html.find("@import") == std::string::npos);
    CHECK(count(html, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;co&#39;") == 2);
  }

  TEST_CASE("malformed lines are skipped and counted, missing fields are no point") {
    RunDir dir;
    dir.write("metrics.jsonl",
              "{\"t\": 1, \"reward_mean\": 0.1, \"tokens_per_s\": 10}\n"
              "not json at all\n"
              "[1, 2, 3]\n"
              "\n"
              "{\"step\": 3, \"reward_mean\": 0.5}\n"
              "{\"t\": \"soon\", \"reward_mean\": 0.5}\n"
              "{\"t\": 2, \"reward_mean\": \"high\"}\n"
              "{\"t\": 3, \"reward_mean\": 0.3, \"staleness_mean\": null}\r\n"
              "{\"t\": 4, \"reward_mean\": 0.2, \"tokens_per_s\": 30, \"mode\": 7}\n"
              "{\"t\": 5, \"reward_mean\": 0.4, \"tokens_");
    REQUIRE(write_report(dir.path().string(), "partial").is_ok());
    std::string html = dir.read("report.html");
    CHECK(html.find("data-count=\"7\"") != std::string::npos);
    CHECK(html.find("7 malformed lines skipped (lines 2, 3, 5, 6, 7, 9, 10)") != std::string::npos);
    auto plots = svgs(html);
    REQUIRE(plots.size() == 4);
    CHECK(polyline(plots[0]).size() == 2);  // reward at t=1 and t=3
    CHECK(polyline(plots[2]).empty());      // throughput: one point only, drawn as a marker
    CHECK(circles(plots[2]).size() == 1);
    for (int k : {1, 3}) {  // accuracy, staleness: nothing
      CHECK(plots[static_cast<std::size_t>(k)].find("no data") != std::string::npos);
      CHECK(circles(plots[static_cast<std::size_t>(k)]).empty());
    }
    CHECK(html.find("2 metrics lines") != std::string::npos);
  }

  TEST_CASE("a missing, empty or wholly malformed metrics file is an error") {
    RunDir dir;
    auto missing = write_report(dir.path().string(), "t");
    CHECK(missing.code() == Code::kNotFound);
    CHECK(missing.message().find("metrics.jsonl") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path() / "report.html"));

    dir.write("metrics.jsonl", "");
    auto empty = write_report(dir.path().string(), "t");
    CHECK(empty.code() == Code::kInvalidArgument);
    CHECK(empty.message().find("is empty") != std::string::npos);

    dir.write("metrics.jsonl", "{oops\n\n{\"reward_mean\": 1}\n");
    auto junk = write_report(dir.path().string(), "t");
    CHECK(junk.code() == Code::kInvalidArgument);
    CHECK(junk.message().find("no usable line (2 malformed)") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path() / "report.html"));

    auto no_dir = write_report((dir.path() / "nope").string(), "t");
    CHECK(no_dir.code() == Code::kNotFound);
  }

  TEST_CASE("summary.json figures are shown in a table, escaped") {
    RunDir dir;
    dir.write("metrics.jsonl", synthetic().text);
    SUBCASE("present") {
      dir.write("summary.json", R"({"job": "j<1>", "mode": "sluice", "outcome": "ok",
        "actor": {"steps": 6, "tokens_per_s": 2823.2216, "accepted_ids": ["a", "b", "c", "d",
          "e", "f", "g", "h", "i"], "staleness_max": 4},
        "manager": {"done": true, "rollouts": [{"id": "r0"}, {"id": "r1"}], "modes": ["x", "y"]},
        "events": ["3.0s: chaos stopped <rollout-1>"]})");
      REQUIRE(write_report(dir.path().string(), "t").is_ok());
      std::string html = dir.read("report.html");
      CHECK(html.find("<table class=\"summary\">") != std::string::npos);
      // The full table is folded: it follows the plots inside <details>.
      CHECK(html.find("<details class=\"all-figures\">") < html.find("<table class=\"summary\">"));
      CHECK(html.find("<svg class=\"plot\"") < html.find("<details"));
      CHECK(html.find("<td>actor.steps</td><td>6</td>") != std::string::npos);
      CHECK(html.find("<td>actor.tokens_per_s</td><td>2823.22</td>") != std::string::npos);
      CHECK(html.find("<td>actor.accepted_ids</td><td>9 items</td>") != std::string::npos);
      CHECK(html.find("<td>manager.rollouts</td><td>2 entries</td>") != std::string::npos);
      CHECK(html.find("<td>manager.modes</td><td>x, y</td>") != std::string::npos);
      CHECK(html.find("<td>manager.done</td><td>true</td>") != std::string::npos);
      CHECK(html.find("<td>job</td><td>j&lt;1&gt;</td>") != std::string::npos);
      CHECK(html.find("<li>3.0s: chaos stopped &lt;rollout-1&gt;</li>") != std::string::npos);
    }
    SUBCASE("absent") {
      REQUIRE(write_report(dir.path().string(), "t").is_ok());
      std::string html = dir.read("report.html");
      CHECK(html.find("No summary.json") != std::string::npos);
      CHECK(html.find("<table") == std::string::npos);
    }
    SUBCASE("not JSON: the plots are still written") {
      dir.write("summary.json", "{\"job\": ");
      REQUIRE(write_report(dir.path().string(), "t").is_ok());
      std::string html = dir.read("report.html");
      CHECK(html.find("summary.json is not a JSON object") != std::string::npos);
      CHECK(svgs(html).size() == 4);
    }
  }

  TEST_CASE("the headline's figures are the summary's") {
    RunDir dir;
    dir.write("metrics.jsonl", synthetic().text);
    dir.write("job.json", R"({"duration_s": 0, "manager": {"prompts": 2, "group_size": 2}})");
    // Two rollouts of 8 and 4 slots; the free slots by cause as the manager reports them.
    const std::string rollouts = R"([
      {"id": "rollout-0", "stats": {"wall_s": 100.0, "max_sequences": 8, "load_s": 1.5,
                                    "barrier_s": 0.5}},
      {"id": "rollout-1", "stats": {"wall_s": 50.0, "max_sequences": 4, "load_s": 0.25,
                                    "barrier_s": 0.0}}])";
    const std::string free = R"({"loading": 12.5, "draining": 3.0, "budget": 250.0,
                                 "backlog": 0.0, "end": 100.0, "other": 20.0})";
    auto summary = [&](const std::string& accepted, const std::string& trained) {
      return R"({"outcome": "ok", "actor": {"initial_accuracy": 0.52, "final_accuracy": 0.713,
        "tokens_per_s": 4470.25, "ids_complete": true, "accepted_ids": )" +
             accepted + R"(, "trained_ids": )" + trained + R"(}, "manager": {"rollouts": )" +
             rollouts + R"(, "free_slot_s": )" + free + "}}";
    };
    auto number = [](const std::string& html, const std::string& tag, const std::string& name) {
      const std::string v = attr(html, tag, name);
      REQUIRE_FALSE(v.empty());
      return std::stod(v);
    };
    SUBCASE("exactly-once held") {
      dir.write("summary.json", summary(R"(["a", "b", "c", "d"])", R"(["a", "b", "c"])"));
      REQUIRE(write_report(dir.path().string(), "t").is_ok());
      const std::string html = dir.read("report.html");
      // The headline opens the page: before the plots and the table.
      CHECK(html.find("<dl class=\"headline\">") < html.find("<svg class=\"plot\""));
      CHECK(number(html, "<dd id=\"headline-accuracy\"", "data-before") == 0.52);
      CHECK(number(html, "<dd id=\"headline-accuracy\"", "data-after") == 0.713);
      CHECK(html.find("+19.3 points") != std::string::npos);
      CHECK(number(html, "<dd id=\"headline-throughput\"", "data-value") == 4470.25);
      // Stall: (1.5 + 0.5 + 0.25) of (100 + 50) rollout-seconds.
      CHECK(number(html, "<dd id=\"headline-stall\"", "data-value") == 2.25 / 150.0);
      CHECK(attr(html, "<dd id=\"headline-once\"", "data-held") == "true");
      CHECK(number(html, "<dd id=\"headline-once\"", "data-consumed") == 4);
      // Slot time: 100 x 8 + 50 x 4 = 1000 slot-seconds; 385.5 free, the rest held a sequence.
      CHECK(number(html, "<p class=\"slot-total\"", "data-slot-s") == 1000.0);
      const std::pair<const char*, double> parts[] = {{"generating (holding a sequence)", 614.5},
                                                      {"waiting for weights", 12.5},
                                                      {"draining an old version", 3.0},
                                                      {"parked by the in-flight budget", 250.0},
                                                      {"paused by the actor&#39;s backlog", 0.0},
                                                      {"no work left (the job&#39;s end)", 100.0},
                                                      {"idle, other", 20.0}};
      double sum = 0;
      for (const auto& [cause, slot_s] : parts) {
        CAPTURE(cause);
        const std::string tag = std::string("<rect class=\"slot\" data-cause=\"") + cause + "\"";
        CHECK(number(html, tag, "data-slot-s") == doctest::Approx(slot_s));
        sum += slot_s;
      }
      CHECK(sum == doctest::Approx(1000.0));
      // The four plots are still the page's plots.
      CHECK(count(html, "<svg class=\"plot\"") == 4);
    }
    SUBCASE("exactly-once failed: one trajectory twice, one lost") {
      dir.write("summary.json", summary(R"(["a", "b", "a"])", R"(["a", "b"])"));
      REQUIRE(write_report(dir.path().string(), "t").is_ok());
      const std::string html = dir.read("report.html");
      CHECK(attr(html, "<dd id=\"headline-once\"", "data-held") == "false");
      CHECK(number(html, "<dd id=\"headline-once\"", "data-twice") == 1);
      CHECK(number(html, "<dd id=\"headline-once\"", "data-lost") == 2);
      CHECK(html.find("FAILED") != std::string::npos);
    }
    SUBCASE("no accuracy measured, no id lists") {
      dir.write("summary.json", R"({"actor": {"initial_accuracy": -1, "final_accuracy": -1}})");
      REQUIRE(write_report(dir.path().string(), "t").is_ok());
      const std::string html = dir.read("report.html");
      CHECK(attr(html, "<dd id=\"headline-accuracy\"", "data-before").empty());
      CHECK(attr(html, "<dd id=\"headline-once\"", "data-held") == "unknown");
      CHECK(html.find("slot-time") == std::string::npos);
    }
  }
}
