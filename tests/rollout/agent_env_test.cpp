// The agent endpoint's episodes over real HTTP on loopback, the rollout played by the test: a
// request of any wrong shape gets 400 and the endpoint goes on; untrusted numbers never wrap;
// every turn is answered, however its episode ends; a stop sequence ends a turn without its text.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>

#include "agent_test_util.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/agent_env.hpp"

using namespace sluice;
using nlohmann::json;
using rollout::EnvAnswer;
using rollout::SequenceState;
using testing::HttpReply;

namespace {

const std::string kToken = "0123456789abcdef0123";
const std::vector<std::int32_t> kPrompt{1, 5, 13, 6, 16};  // "^2+3="
constexpr std::uint64_t kMaxContext = 96;
constexpr std::uint64_t kMaxU64 = 18446744073709551615ull;

SequenceState work(const std::string& id, std::uint64_t max_new_tokens = 40) {
  SequenceState s;
  s.trajectory_id = id;
  s.prompt_id = id.substr(0, id.find('/'));
  s.prompt_tokens = kPrompt;
  s.max_new_tokens = max_new_tokens;
  s.call_token = rl::Tokenizer::kEos;
  return s;
}

// The endpoint with the test as its rollout: `work` is what /v1/episodes hands out, and
// `answers` what the agent said last for each episode (the next turn, or its end).
struct Endpoint {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  rollout::AgentEndpointConfig config;
  std::unique_ptr<rollout::AgentEnvironment> env;
  std::deque<SequenceState> queue;
  std::map<std::string, SequenceState> states;  // each episode as the rollout holds it
  std::map<std::string, std::optional<core::Result<EnvAnswer>>> answers;

  void start() {
    rollout::AgentHooks h;
    h.max_context = kMaxContext;
    h.vocab = rl::Tokenizer::kVocabSize;
    h.claim = [this]() -> std::optional<SequenceState> {
      if (queue.empty()) return std::nullopt;
      SequenceState s = queue.front();
      queue.pop_front();
      turn_ended(s);
      return s;
    };
    auto e = rollout::AgentEnvironment::create(*loop, "127.0.0.1:0", kToken, config, h);
    REQUIRE_MESSAGE(e.is_ok(), e.status().to_string());
    env = std::move(e).value();
  }
  // The rollout hands the episode back to the agent (a turn ended, or it begins).
  void turn_ended(const SequenceState& s) {
    states[s.trajectory_id] = s;
    const std::string id = s.trajectory_id;
    env->answer(s, [this, id](core::Result<EnvAnswer> a) { answers[id] = std::move(a); });
  }
  // The agent's answer for `id`: the next turn begins as the rollout begins it.
  SequenceState next_turn(const std::string& id) {
    REQUIRE(answers[id].has_value());
    REQUIRE(answers[id]->is_ok());
    const EnvAnswer a = answers[id]->value();
    answers[id].reset();
    SequenceState s = states[id];
    rollout::record_environment(s, a.tokens);
    s.turn_limit = a.turn_limit;
    s.stop = a.stop;
    return s;
  }
  std::future<HttpReply> send(const std::string& path, const std::string& body,
                              const std::string& token = kToken) {
    const std::string url = env->url();
    return std::async(std::launch::async, [url, path, body, token] {
      return testing::http_post(url, path, body, token);
    });
  }
  HttpReply post(const std::string& path, const json& body) { return post_raw(path, body.dump()); }
  HttpReply post_raw(const std::string& path, const std::string& body) {
    auto f = send(path, body);
    REQUIRE(testing::pump(*loop, f));
    return f.get();
  }
  // Starts an episode; its session.
  std::string take() {
    HttpReply r = post("/v1/episodes", json::object());
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    return r.body["session"].get<std::string>();
  }
  // Sends a turn request and runs the loop until the rollout has it (the answer waits).
  std::future<HttpReply> ask(const std::string& id, const json& body,
                             const std::string& path = "/v1/completions") {
    auto f = send(path, body.dump());
    const bool got = loop->run_until([&] { return answers[id].has_value(); }, core::Millis(20000));
    REQUIRE(got);
    return f;
  }
  HttpReply finish(std::future<HttpReply>& f) {
    REQUIRE(testing::pump(*loop, f));
    return f.get();
  }
};

void model_says(SequenceState& s, const std::vector<std::int32_t>& tokens) {
  for (std::int32_t t : tokens)
    rollout::record_sample(s, t, -0.5f, 1);
}

std::string message_of(const HttpReply& r) {
  if (!r.body.is_object() || !r.body.contains("error")) return r.raw;
  return r.body["error"].value("message", r.raw);
}

// A list of one message.
json one(const json& message) {
  return json::array({message});
}

std::vector<std::int32_t> plus(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_SUITE("rollout.agent") {
  TEST_CASE(
      "a field of the wrong type, a null or a bad number is a 400 naming it, and the endpoint "
      "goes on") {
    Endpoint e;
    e.queue.push_back(work("p1/0"));
    e.start();
    const std::string sid = e.take();
    const json prompt = kPrompt;
    struct Bad {
      const char* path;
      std::string body;
      const char* names;
    };
    auto turn = [&](json extra) {
      json b{{"session", sid}, {"prompt", prompt}};
      for (auto& [k, v] : extra.items())
        b[k] = v;
      return b.dump();
    };
    const std::string c = "/v1/completions", chat = "/v1/chat/completions",
                      end = "/v1/episodes/end";
    const std::vector<Bad> bad{
        {c.c_str(), json{{"session", 7}, {"prompt", prompt}}.dump(), "session"},
        {c.c_str(), json{{"session", nullptr}, {"prompt", prompt}}.dump(), "session"},
        {c.c_str(), json{{"prompt", prompt}}.dump(), "session"},
        {c.c_str(), json{{"session", json::array()}, {"prompt", prompt}}.dump(), "session"},
        {c.c_str(), json{{"session", std::string(300, 'x')}, {"prompt", prompt}}.dump(), "session"},
        {c.c_str(), turn({{"prompt", "^2+3="}}), "prompt"},
        {c.c_str(), turn({{"prompt", nullptr}}), "prompt"},
        {c.c_str(), turn({{"prompt", {1, 2.5}}}), "prompt"},
        {c.c_str(), turn({{"prompt", {1, -3}}}), "prompt"},
        {c.c_str(), turn({{"prompt", {1, 20}}}), "prompt"},
        {c.c_str(), turn({{"prompt", {1, kMaxU64}}}), "prompt"},
        {c.c_str(), turn({{"max_tokens", -1}}), "max_tokens"},
        {c.c_str(), turn({{"max_tokens", 0}}), "max_tokens"},
        {c.c_str(), turn({{"max_tokens", 1.5}}), "max_tokens"},
        {c.c_str(), turn({{"max_tokens", "5"}}), "max_tokens"},
        {c.c_str(), turn({{"max_tokens", true}}), "max_tokens"},
        {c.c_str(), turn({{"max_tokens", 1e30}}), "max_tokens"},
        {c.c_str(),
         R"({"session":")" + sid + R"(","prompt":[1],"max_tokens":18446744073709551616})",
         "max_tokens"},
        {c.c_str(), turn({{"stop", 5}}), "stop"},
        {c.c_str(), turn({{"stop", ""}}), "stop"},
        {c.c_str(), turn({{"stop", std::string(65, '1')}}), "stop"},
        {c.c_str(), turn({{"stop", {"1", "2", "3", "4", "5"}}}), "stop"},
        {c.c_str(), turn({{"stop", {"1", nullptr}}}), "stop"},
        {c.c_str(), turn({{"stop", json::array({1})}}), "stop"},
        {c.c_str(), turn({{"stop", json::object()}}), "stop"},
        {c.c_str(), turn({{"stop", "abc"}}), "stop"},
        {c.c_str(), turn({{"stream", true}}), "stream"},
        {c.c_str(), turn({{"stream", "no"}}), "stream"},
        {chat.c_str(), json{{"session", sid}, {"messages", "hi"}}.dump(), "messages"},
        {chat.c_str(), json{{"session", sid}, {"messages", json::array()}}.dump(), "messages"},
        {chat.c_str(), json{{"session", sid}, {"messages", json::array({"2+3"})}}.dump(),
         "messages[0]"},
        {chat.c_str(),
         json{{"session", sid}, {"messages", one({{"role", "user"}, {"content", 5}})}}.dump(),
         "messages[0].content"},
        {chat.c_str(),
         json{{"session", sid}, {"messages", one({{"role", 1}, {"content", "2"}})}}.dump(),
         "messages[0].role"},
        {chat.c_str(), json{{"session", sid}, {"messages", one({{"content", "hello"}})}}.dump(),
         "messages"},
        {end.c_str(), json{{"session", sid}, {"reward", nullptr}}.dump(), "reward"},
        {end.c_str(), json{{"session", sid}, {"reward", "1"}}.dump(), "reward"},
        {end.c_str(), json{{"session", sid}, {"reward", true}}.dump(), "reward"},
        {end.c_str(), json{{"session", sid}}.dump(), "reward"},
        {end.c_str(), json{{"session", 7}, {"reward", 1}}.dump(), "session"},
        {end.c_str(), R"({"session":")" + sid + R"(","reward":1e400})", ""},
        {c.c_str(), "[]", "JSON object"},
        {c.c_str(), "null", "JSON object"},
        {c.c_str(), "7", "JSON object"},
        {c.c_str(), "{", "JSON object"},
        {c.c_str(), std::string(20000, '[') + std::string(20000, ']'), "JSON object"},
    };
    for (const Bad& b : bad) {
      HttpReply r = e.post_raw(b.path, b.body);
      INFO(b.path, " ", b.body.substr(0, 120));
      CHECK(r.status == 400);
      CHECK_MESSAGE(message_of(r).find(b.names) != std::string::npos, message_of(r));
    }
    // Nothing changed: the session takes its turn.
    CHECK(e.env->sessions() == 1);
    CHECK_FALSE(e.answers[sid].has_value());
    auto f =
        e.ask(sid, {{"session", sid}, {"prompt", prompt}, {"max_tokens", 4}, {"stop", nullptr}});
    SequenceState s = e.next_turn(sid);
    CHECK(s.turn_limit == 4);
    model_says(s, {7, 8});
    e.turn_ended(s);
    HttpReply r = e.finish(f);
    CHECK(r.status == 200);
    CHECK(r.body["choices"][0]["tokens"] == json({7, 8}));
  }

  TEST_CASE("max_tokens near 2^64 saturates the turn's limit instead of wrapping") {
    Endpoint e;
    e.queue.push_back(work("p2/0"));
    e.start();
    const std::string sid = e.take();
    auto f = e.ask(sid, {{"session", sid}, {"prompt", kPrompt}, {"max_tokens", kMaxU64}});
    SequenceState s = e.next_turn(sid);
    // The episode's own bound (max_new_tokens 40) is the tighter one.
    CHECK(s.turn_limit == 40);
    model_says(s, {7, 8, 9});
    e.turn_ended(s);
    CHECK(e.finish(f).status == 200);
    // Generated tokens so far + 2^64 - 1 (or - 2) would wrap to a limit below them.
    for (std::uint64_t max : {kMaxU64, kMaxU64 - 1}) {
      const auto context = plus(plus(kPrompt, {7, 8, 9}), {3});
      auto g = e.ask(sid, {{"session", sid}, {"prompt", context}, {"max_tokens", max}});
      SequenceState t = e.next_turn(sid);
      CHECK(t.turn_limit == 40);
      CHECK(t.generated.size() == 4);
      t.generated.pop_back();  // the agent's token again, next time round
      t.logprobs.pop_back();
      t.loss_mask.pop_back();
      t.token_versions.pop_back();
      e.turn_ended(t);
      CHECK(e.finish(g).status == 200);
    }
  }

  TEST_CASE("a turn is bounded by the episode's max_new_tokens, and a full episode refuses more") {
    Endpoint e;
    e.queue.push_back(work("p3/0", 6));
    e.start();
    const std::string sid = e.take();
    auto f = e.ask(sid, {{"session", sid}, {"prompt", kPrompt}, {"max_tokens", 100}});
    SequenceState s = e.next_turn(sid);
    CHECK(s.turn_limit == 6);
    model_says(s, {7, 8, 9, 10, 11, 12});
    REQUIRE(s.awaits_environment());  // the turn ends at its limit, as a call
    e.turn_ended(s);
    HttpReply r = e.finish(f);
    CHECK(r.status == 200);
    CHECK(r.body["choices"][0]["finish_reason"] == "length");
    CHECK(r.body["choices"][0]["tokens"].size() == 6);
    r = e.post("/v1/completions",
               {{"session", sid}, {"prompt", plus(kPrompt, {7, 8, 9, 10, 11, 12})}});
    CHECK(r.status == 400);
    CHECK(message_of(r).find("max_new_tokens") != std::string::npos);
    // The episode is still the agent's to end, with its reward.
    r = e.post("/v1/episodes/end", {{"session", sid}, {"reward", 0.5}});
    CHECK(r.status == 200);
    REQUIRE(e.answers[sid].has_value());
    CHECK(e.answers[sid]->value().done);
    CHECK(*e.answers[sid]->value().reward == 0.5);
  }

  TEST_CASE("every turn is answered, however its episode ends on the rollout's side") {
    Endpoint e;
    for (int i = 0; i < 3; ++i)
      e.queue.push_back(work("p4/" + std::to_string(i)));
    e.start();
    // Its max_new_tokens reached in the engine: the tokens, "length", and the episode is over.
    std::string sid = e.take();
    auto f = e.ask(sid, {{"session", sid}, {"prompt", kPrompt}, {"max_tokens", 8}});
    SequenceState s = e.next_turn(sid);
    model_says(s, {7, 8, 9});
    e.env->ended(s, true, "finished");
    HttpReply r = e.finish(f);
    CHECK(r.status == 200);
    CHECK(r.body["choices"][0]["tokens"] == json({7, 8, 9}));
    CHECK(r.body["choices"][0]["finish_reason"] == "length");
    CHECK(r.body["episode_ended"] == true);
    CHECK(e.post("/v1/completions", {{"session", sid}, {"prompt", kPrompt}}).status == 409);
    // Moved to another rollout (a repack, a declared-dead rollout, leaving): 409 saying so.
    sid = e.take();
    f = e.ask(sid, {{"session", sid}, {"prompt", kPrompt}});
    s = e.next_turn(sid);
    e.env->ended(s, false, "moved to another rollout");
    r = e.finish(f);
    CHECK(r.status == 409);
    CHECK(message_of(r).find("moved to another rollout") != std::string::npos);
    // Abandoned while waiting (its call cancelled).
    sid = e.take();
    f = e.ask(sid, {{"session", sid}, {"prompt", kPrompt}});
    e.env->cancel(sid);
    CHECK(e.finish(f).status == 409);
    // No session is left behind.
    CHECK(e.env->sessions() == 0);
    CHECK(e.env->pending() == 0);
  }

  TEST_CASE("a stop sequence ends the turn without its text, and the next context holds none") {
    Endpoint e;
    e.queue.push_back(work("p5/0"));
    e.start();
    const std::string sid = e.take();
    const json messages = one({{"role", "user"}, {"content", "2+3="}});
    auto f = e.ask(sid, {{"session", sid}, {"messages", messages}, {"stop", {"12", ","}}},
                   "/v1/chat/completions");
    SequenceState s = e.next_turn(sid);
    REQUIRE(s.stop.sequences.size() == 2);
    CHECK(s.stop.sequences[0] == std::vector<std::int32_t>{4, 5});
    CHECK(s.stop.sequences[1] == std::vector<std::int32_t>{17});
    CHECK(s.stop.from == 0);
    // The model writes "4512": the turn ends there, and "12" leaves the episode.
    model_says(s, {7, 8, 4});
    CHECK_FALSE(s.awaits_environment());
    model_says(s, {5});
    REQUIRE(s.awaits_environment());
    CHECK(s.stop_length() == 2);
    REQUIRE(rollout::cut_stop(s));
    CHECK(s.generated == std::vector<std::int32_t>{7, 8});
    CHECK(s.loss_mask.size() == 2);
    CHECK(s.logprobs.size() == 2);
    e.turn_ended(s);
    HttpReply r = e.finish(f);
    CHECK(r.status == 200);
    CHECK(r.body["choices"][0]["message"]["content"] == "45");
    CHECK(r.body["choices"][0]["finish_reason"] == "stop");
    // The agent's next context is what it saw: accepted as the episode's tokens exactly.
    json next = messages;
    next.push_back(json{{"role", "assistant"}, {"content", "45"}});
    next.push_back(json{{"role", "user"}, {"content", ":"}});
    f = e.ask(sid, {{"session", sid}, {"messages", next}, {"stop", ","}}, "/v1/chat/completions");
    s = e.next_turn(sid);
    CHECK(s.generated == std::vector<std::int32_t>{7, 8, 18});
    CHECK(s.stop.from == 3);
    CHECK_FALSE(s.stop.hit);
    // A stop sequence counts only the turn's own tokens: ":" then "," would match across.
    s.stop.sequences = {std::vector<std::int32_t>{18, 17}};
    model_says(s, {17});
    CHECK(s.stop_length() == 0);
    model_says(s, {2});  // EOS
    e.turn_ended(s);
    r = e.finish(f);
    CHECK(r.body["choices"][0]["message"]["content"] == ",$");
    CHECK(r.body["choices"][0]["finish_reason"] == "stop");
    // The stop travels with a sequence that moves, checked on arrival.
    auto back = SequenceState::from_json(json::parse(s.to_json().dump()));
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->stop.sequences == s.stop.sequences);
    CHECK(back->stop.from == s.stop.from);
    json bad = s.to_json();
    bad["stop"]["sequences"] = json::array(
        {json::array({1}), json::array({2}), json::array({3}), json::array({4}), json::array({5})});
    CHECK_FALSE(SequenceState::from_json(bad).is_ok());
    bad["stop"]["sequences"] = json::array({json::array()});
    CHECK_FALSE(SequenceState::from_json(bad).is_ok());
  }

  TEST_CASE("max_sessions bounds the episodes open at once (429)") {
    Endpoint e;
    e.config.max_sessions = 1;
    e.queue.push_back(work("p6/0"));
    e.queue.push_back(work("p6/1"));
    e.start();
    const std::string sid = e.take();
    HttpReply r = e.post("/v1/episodes", json::object());
    CHECK(r.status == 429);
    CHECK(e.queue.size() == 1);  // nothing was claimed
    CHECK(e.post("/v1/episodes/end", {{"session", sid}, {"reward", 1}}).status == 200);
    CHECK(e.take() == "p6/1");
  }

  TEST_CASE("a turn not answered in time gets 504, and its session is forgotten") {
    Endpoint e;
    e.config.answer_timeout_ms = 200;
    e.config.sweep_ms = 20;
    e.queue.push_back(work("p7/0"));
    e.start();
    const std::string sid = e.take();
    auto f = e.ask(sid, {{"session", sid}, {"prompt", kPrompt}});
    HttpReply r = e.finish(f);
    CHECK(r.status == 504);
    CHECK(e.loop->run_until([&] { return e.env->sessions() == 0; }, core::Millis(5000)));
  }

  TEST_CASE("the token comes from a file only its owner may read") {
    const auto dir = std::filesystem::temp_directory_path() / "sluice_agent_token_test";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "token").string();
    { std::ofstream(path) << "  " << kToken << " \n"; }
    ::chmod(path.c_str(), 0644);
    auto t = rollout::read_agent_token(path);
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.status().message().find("chmod 600") != std::string::npos);
    ::chmod(path.c_str(), 0600);
    t = rollout::read_agent_token(path);
    REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
    CHECK(*t == kToken);
    { std::ofstream(path) << "short\n"; }
    CHECK_FALSE(rollout::read_agent_token(path).is_ok());
    CHECK_FALSE(rollout::read_agent_token("").is_ok());
    CHECK_FALSE(rollout::read_agent_token((dir / "none").string()).is_ok());
    std::filesystem::remove_all(dir);
  }
}
