// An environment in another process, driven directly on an event loop (no worker, no manager):
// the rollout's thread never waits on a program that stops reading (it is killed and started
// again, its episodes failed), an over-long line fails only the episodes pending there, an
// episode the program never saw is replayed (reset, its recorded turns, then its call), and
// episodes that end are closed.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/event_loop.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/command_env.hpp"

using namespace sluice;
using namespace sluice::rollout;
using core::Millis;
using nlohmann::json;

namespace {

constexpr std::int32_t kCall = rl::Tokenizer::kEos;

bool have_python() {
  return std::system("command -v python3 > /dev/null 2>&1") == 0;
}

std::unique_ptr<core::EventLoop> make_loop() {
  auto loop = core::EventLoop::create();
  REQUIRE(loop.is_ok());
  return std::move(loop).value();
}

std::unique_ptr<CommandEnvironment> make_env(core::EventLoop& loop, std::vector<std::string> argv,
                                             std::size_t max_line = std::size_t{8} << 20,
                                             Millis stall = Millis(120000),
                                             std::string rollout_id = "") {
  CommandEnvOptions o;
  o.argv = std::move(argv);
  o.rollout_id = std::move(rollout_id);
  o.call_token = kCall;
  o.vocab = rl::Tokenizer::kVocabSize;
  o.max_line = max_line;
  o.stall_timeout = stall;
  auto env = CommandEnvironment::create(loop, std::move(o));
  REQUIRE(env.is_ok());
  return std::move(env).value();
}

SequenceState episode(const std::string& id, std::size_t prompt_tokens = 4) {
  SequenceState s;
  s.trajectory_id = id;
  s.prompt_id = id.substr(0, id.find('/'));
  for (std::size_t i = 0; i < prompt_tokens; ++i)
    s.prompt_tokens.push_back(3 + static_cast<std::int32_t>(i % 10));
  s.max_new_tokens = 64;
  s.call_token = kCall;
  return s;
}

void model_turn(SequenceState& s, const std::vector<std::int32_t>& tokens) {
  for (std::int32_t t : tokens)
    record_sample(s, t, -0.5f, 1);
}

// Asks `env` to answer `s` and runs the loop until it does (at most 20 s).
core::Result<EnvAnswer> ask(core::EventLoop& loop, Environment& env, const SequenceState& s) {
  std::optional<core::Result<EnvAnswer>> got;
  env.answer(s, [&](core::Result<EnvAnswer> a) { got = std::move(a); });
  loop.run_until([&] { return got.has_value(); }, Millis(20000));
  REQUIRE(got.has_value());
  return std::move(*got);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);)
    lines.push_back(l);
  return lines;
}

// The program's log, once it holds `n` lines (at most 10 s).
std::vector<std::string> wait_lines(core::EventLoop& loop, const std::string& path, std::size_t n) {
  loop.run_until([&] { return read_lines(path).size() >= n; }, Millis(10000));
  return read_lines(path);
}

// A program that logs every line it is sent and answers reset with nothing and each step with
// how many steps its episode has had; a step for an episode it never reset kills it.
const char* kCounter = R"(
import json, sys
log = open(sys.argv[1], "a")
steps = {}
for line in sys.stdin:
    log.write(line)
    log.flush()
    m = json.loads(line)
    ep = m["episode"]
    if m["op"] == "close":
        steps.pop(ep, None)
        continue
    if m["op"] == "reset":
        steps[ep] = 0
        obs = ""
    else:
        steps[ep] += 1
        obs = str(steps[ep])
    print(json.dumps({"episode": ep, "text": obs, "done": False}), flush=True)
)";

}  // namespace

TEST_SUITE("command environment") {
  TEST_CASE("model_turns splits at the call and at the environment's tokens") {
    SequenceState s = episode("p1/0");
    record_environment(s, {4});  // the reset's observation: before any turn
    model_turn(s, {7, kCall});
    record_environment(s, {5});
    model_turn(s, {8, kCall, 9, kCall});  // an empty observation between two turns
    model_turn(s, {6});                   // a turn not over yet
    auto turns = model_turns(s);
    REQUIRE(turns.size() == 4);
    CHECK(turns[0] == std::vector<std::int32_t>{7, kCall});
    CHECK(turns[1] == std::vector<std::int32_t>{8, kCall});
    CHECK(turns[2] == std::vector<std::int32_t>{9, kCall});
    CHECK(turns[3] == std::vector<std::int32_t>{6});
    CHECK(model_turns(episode("p2/0")).empty());
  }

  TEST_CASE("an episode the program never saw is replayed, and episodes that end are closed") {
    if (!have_python()) {
      MESSAGE("skipped: no python3");
      return;
    }
    auto loop = make_loop();
    const std::string log = (std::filesystem::temp_directory_path() /
                             ("sluice-command-env-" + std::to_string(::getpid()) + ".log"))
                                .string();
    std::remove(log.c_str());
    auto env = make_env(*loop, {"python3", "-c", kCounter, log});

    // An episode that ran two turns elsewhere reaches this program at its second call.
    SequenceState s = episode("p1/0");
    model_turn(s, {7, kCall});
    record_environment(s, {5});
    model_turn(s, {8, 9, kCall});
    auto a = ask(*loop, *env, s);
    REQUIRE(a.is_ok());
    // Its answer is the program's to the call (two steps seen), not to the replay.
    CHECK(a->tokens == rl::Tokenizer::encode("2").value());
    CHECK_FALSE(a->done);
    CHECK(env->open() == 1);

    // Its next call is a plain step.
    record_environment(s, a->tokens);
    model_turn(s, {6, kCall});
    a = ask(*loop, *env, s);
    REQUIRE(a.is_ok());
    CHECK(a->tokens == rl::Tokenizer::encode("3").value());

    // A new episode resets; an episode that ends is closed; so is one that is not live.
    a = ask(*loop, *env, episode("p2/0"));
    REQUIRE(a.is_ok());
    CHECK(a->tokens.empty());
    env->close("p1/0");
    env->retain({"p3/0"});
    CHECK(env->open() == 0);
    env->close("p1/0");  // closed already: nothing more is sent

    std::vector<std::string> lines = wait_lines(*loop, log, 7);
    REQUIRE(lines.size() == 7);
    std::vector<std::string> seen;
    for (const auto& l : lines) {
      json j = json::parse(l);
      seen.push_back(j["op"].get<std::string>() + " " + j["episode"].get<std::string>() +
                     (j.contains("replay") ? " replay" : ""));
    }
    CHECK(seen == std::vector<std::string>{"reset p1/0", "step p1/0 replay", "step p1/0",
                                           "step p1/0", "reset p2/0", "close p1/0", "close p2/0"});
    // Op and episode lead each line, so a reader that refuses a line can name its episode.
    CHECK(lines[0].rfind(R"({"op":"reset","episode":"p1/0",)", 0) == 0);
    CHECK(json::parse(lines[1])["action"] == json{7, kCall});
    CHECK(json::parse(lines[2])["action"] == json{8, 9, kCall});
    std::remove(log.c_str());
  }

  TEST_CASE("the program is told which rollout runs it") {
    // It answers each reset with the digits of the rollout's number (SLUICE_ROLLOUT_ID).
    const char* program = R"(
import json, os, sys
me = os.environ.get("SLUICE_ROLLOUT_ID", "unset")
for line in sys.stdin:
    m = json.loads(line)
    if m["op"] != "close":
        print(json.dumps({"episode": m["episode"], "text": me.split("-")[-1], "done": False}),
              flush=True)
)";
    if (!have_python()) {
      MESSAGE("skipped: no python3");
      return;
    }
    auto loop = make_loop();
    auto env = make_env(*loop, {"python3", "-c", program}, std::size_t{8} << 20, Millis(120000),
                        "rollout-42");
    auto a = ask(*loop, *env, episode("p1/0"));
    REQUIRE(a.is_ok());
    CHECK(a->tokens == rl::Tokenizer::encode("42").value());
  }

  TEST_CASE(
      "a late answer for an episode that left is dropped quietly, and a stranger's is garbage") {
    // It answers an episode no one asked about at once, then each message 300 ms after it.
    const char* program = R"(
import json, sys, time
print(json.dumps({"episode": "nobody/0", "text": "", "done": False}), flush=True)
for line in sys.stdin:
    m = json.loads(line)
    if m["op"] == "close":
        continue
    time.sleep(0.3)
    print(json.dumps({"episode": m["episode"], "text": "", "done": False}), flush=True)
)";
    if (!have_python()) {
      MESSAGE("skipped: no python3");
      return;
    }
    auto loop = make_loop();
    auto env = make_env(*loop, {"python3", "-c", program});
    bool called = false;
    env->answer(episode("p1/0"), [&](core::Result<EnvAnswer>) { called = true; });
    env->cancel("p1/0");  // it left (abandoned, moved) while the program was answering
    auto b = ask(*loop, *env, episode("p2/0"));  // answered after p1/0's late answer
    REQUIRE(b.is_ok());
    CHECK_FALSE(called);
    CHECK(env->faults().garbage == 1);  // nobody/0's only
  }

  TEST_CASE("a program that dies before the next call fails what it owed, and another starts") {
    // It exits on p1/0's reset, unanswered, leaving a mark first; the next program answers.
    const char* program = R"(
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["episode"] == "p1/0":
        open(sys.argv[1], "w").close()
        os._exit(3)
    if m["op"] != "close":
        print(json.dumps({"episode": m["episode"], "text": "", "done": False}), flush=True)
)";
    if (!have_python()) {
      MESSAGE("skipped: no python3");
      return;
    }
    const std::filesystem::path mark =
        std::filesystem::temp_directory_path() / ("sluice-env-died-" + std::to_string(::getpid()));
    std::filesystem::remove(mark);
    auto loop = make_loop();
    auto env = make_env(*loop, {"python3", "-c", program, mark.string()});
    std::optional<core::Result<EnvAnswer>> first;
    env->answer(episode("p1/0"), [&](core::Result<EnvAnswer> a) { first = std::move(a); });
    // The program reads it and exits while the loop does not run: no poll sees it go.
    for (int i = 0; i < 200 && !std::filesystem::exists(mark); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(std::filesystem::exists(mark));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto b = ask(*loop, *env, episode("p2/0"));
    REQUIRE(b.is_ok());
    loop->run_until([&] { return first.has_value(); }, Millis(3000));
    REQUIRE(first.has_value());
    REQUIRE_FALSE(first->is_ok());
    CHECK(first->status().message().find("exited with status 3") != std::string::npos);
    std::filesystem::remove(mark);
  }

  TEST_CASE("a program that stops reading never blocks the loop, and it is replaced") {
    auto loop = make_loop();
    auto env = make_env(*loop, {"sleep", "60"}, std::size_t{8} << 20, Millis(300));
    // Each line is far more than a pipe holds (64 KiB).
    SequenceState s = episode("p1/0", 60000);
    std::optional<core::Result<EnvAnswer>> got;
    const auto t0 = core::Clock::now();
    env->answer(s, [&](core::Result<EnvAnswer> a) { got = std::move(a); });
    const auto took = core::Clock::now() - t0;
    // Generous: the old write waited up to 2 s for room, the manager's heartbeat time-out.
    CHECK(took < std::chrono::milliseconds(500));
    CHECK(env->unwritten() > 0);
    CHECK(env->written() > 0);
    loop->run_until([&] { return got.has_value(); }, Millis(20000));
    REQUIRE(got.has_value());
    REQUIRE_FALSE(got->is_ok());
    CHECK(got->status().message().find("took nothing written to it") != std::string::npos);
    CHECK(env->faults().stalled == 1);
    CHECK(env->pending() == 0);
    CHECK(env->unwritten() == 0);  // what was not written went with it

    // The next episode starts another program (which stalls too).
    auto again = ask(*loop, *env, episode("p2/0", 60000));
    CHECK_FALSE(again.is_ok());
    CHECK(env->faults().stalled == 2);
  }

  TEST_CASE("an over-long line fails the episodes pending there, and the program goes on") {
    if (!have_python()) {
      MESSAGE("skipped: no python3");
      return;
    }
    // It writes 5000 bytes with no newline at once, and ends that line when the first message
    // comes, with 5000 more; then it answers each reset.
    const char* program = R"(
import json, sys
sys.stdout.write("x" * 5000)
sys.stdout.flush()
first = True
for line in sys.stdin:
    m = json.loads(line)
    if m["op"] == "close":
        continue
    if first:
        first = False
        sys.stdout.write("y" * 5000 + "\n")
        sys.stdout.flush()
        continue
    print(json.dumps({"episode": m["episode"], "text": "", "done": False}), flush=True)
)";
    auto loop = make_loop();
    auto env = make_env(*loop, {"python3", "-c", program}, 1000);
    auto a = ask(*loop, *env, episode("p1/0"));
    REQUIRE_FALSE(a.is_ok());
    CHECK(a.status().message().find("over env_max_line_bytes") != std::string::npos);
    CHECK(env->faults().overlong == 1);
    auto b = ask(*loop, *env, episode("p2/0"));
    REQUIRE(b.is_ok());
    CHECK(b->tokens.empty());
    CHECK(env->faults().overlong == 1);
    CHECK(env->faults().stalled == 0);
  }
}
