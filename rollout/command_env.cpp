#include "rollout/command_env.hpp"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cmath>

#include "core/log.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::rollout {

namespace log = core::log;
using nlohmann::json;

namespace {

// How often the environment's output is read and its stdin written while it runs.
constexpr core::Millis kPollPeriod{2};
// How many dropped calls are remembered, so that their late answers are not taken for garbage.
constexpr std::size_t kForgottenRemembered = 4096;

// Lines to the program name their op and episode first (a reader that refuses a line can still
// name its episode): ordered_json keeps the order given.
using Message = nlohmann::ordered_json;

std::string reset_line(const SequenceState& s) {
  return Message{{"op", "reset"},
                 {"episode", s.trajectory_id},
                 {"prompt", s.prompt_tokens},
                 {"text", rl::Tokenizer::decode(s.prompt_tokens)}}
             .dump() +
         "\n";
}

std::string step_line(const std::string& id, const std::vector<std::int32_t>& action, bool replay) {
  Message m{
      {"op", "step"}, {"episode", id}, {"action", action}, {"text", rl::Tokenizer::decode(action)}};
  if (replay) m["replay"] = true;
  return m.dump() + "\n";
}

}  // namespace

std::vector<std::vector<std::int32_t>> model_turns(const SequenceState& s) {
  std::vector<std::vector<std::int32_t>> turns;
  std::vector<std::int32_t> turn;
  for (std::size_t i = 0; i < s.generated.size(); ++i) {
    const bool sampled = i < s.loss_mask.size() && s.loss_mask[i] == 1;
    if (!sampled) {
      if (!turn.empty()) turns.push_back(std::move(turn));
      turn.clear();
      continue;
    }
    turn.push_back(s.generated[i]);
    if (s.generated[i] == s.call_token) {
      turns.push_back(std::move(turn));
      turn.clear();
    }
  }
  if (!turn.empty()) turns.push_back(std::move(turn));
  return turns;
}

core::Result<std::unique_ptr<CommandEnvironment>> CommandEnvironment::create(
    core::EventLoop& loop, CommandEnvOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return core::invalid_argument("env_command: no program");
  }
  if (options.vocab <= 0 || options.call_token < 0 || options.call_token >= options.vocab) {
    return core::invalid_argument("env_call_token must be a token id of the model's vocabulary");
  }
  if (options.max_line == 0) return core::invalid_argument("env_max_line_bytes must be at least 1");
  if (options.stall_timeout.count() <= 0) {
    return core::invalid_argument("env_command: the stall time-out must be positive");
  }
  std::unique_ptr<CommandEnvironment> env(new CommandEnvironment(loop, std::move(options)));
  SLUICE_TRY(env->start());
  return env;
}

CommandEnvironment::~CommandEnvironment() = default;

core::Status CommandEnvironment::start() {
  core::Subprocess::Options o;
  o.argv = options_.argv;
  o.cwd = options_.cwd;
  o.stderr_path = options_.stderr_path;
  o.pipe_stdin = true;
  o.search_path = true;
  if (!options_.rollout_id.empty())
    o.extra_env.push_back("SLUICE_ROLLOUT_ID=" + options_.rollout_id);
  SLUICE_ASSIGN_OR_RETURN(proc_, core::Subprocess::spawn(o));
  // A new program holds no episode, owes no answer and has been sent nothing.
  open_.clear();
  forgotten_.clear();
  forgotten_order_.clear();
  out_.clear();
  poller_ = loop_->every(kPollPeriod, [this] { poll(); });
  log::info("environment: started {} (pid {})", options_.argv[0], proc_->pid());
  return {};
}

void CommandEnvironment::answer(const SequenceState& s, Done done) {
  const std::string& id = s.trajectory_id;
  // A program that died since the last poll: what it answered is taken and what it still owed
  // fails now, rather than waiting out env_timeout_ms behind the program started next.
  if (proc_ && !proc_->running()) poll();
  if (!proc_ || !proc_->running()) {
    proc_.reset();
    if (core::Status st = start(); !st.is_ok()) {
      loop_->post([done, st] { done(st); });
      return;
    }
  }
  Pending p;
  p.done = std::move(done);
  const std::vector<std::vector<std::int32_t>> turns = model_turns(s);
  if (turns.empty()) {
    p.lines.push_back(reset_line(s));
  } else {
    // An episode this program never saw (it moved here, or the program was started again since)
    // is rebuilt first: reset, then its recorded turns.
    if (open_.count(id) == 0) {
      p.lines.push_back(reset_line(s));
      for (std::size_t t = 0; t + 1 < turns.size(); ++t)
        p.lines.push_back(step_line(id, turns[t], /*replay=*/true));
    }
    p.lines.push_back(step_line(id, turns.back(), /*replay=*/false));
  }
  open_.insert(id);
  const std::string first = p.lines.front();
  pending_[id] = std::move(p);
  send(first);
}

void CommandEnvironment::forget(const std::string& id) {
  if (pending_.erase(id) == 0 || !proc_ || forgotten_.count(id) > 0) return;
  forgotten_.insert(id);
  forgotten_order_.push_back(id);
  if (forgotten_order_.size() > kForgottenRemembered) {
    forgotten_.erase(forgotten_order_.front());
    forgotten_order_.pop_front();
  }
}

void CommandEnvironment::close(const std::string& trajectory_id) {
  forget(trajectory_id);
  if (open_.erase(trajectory_id) == 0 || !proc_) return;
  send(Message{{"op", "close"}, {"episode", trajectory_id}}.dump() + "\n");
}

void CommandEnvironment::retain(const std::set<std::string>& live) {
  std::vector<std::string> gone;
  for (const std::string& id : open_) {
    if (live.count(id) == 0 && pending_.count(id) == 0) gone.push_back(id);
  }
  for (const std::string& id : gone)
    close(id);
}

void CommandEnvironment::send(const std::string& line) {
  if (out_.empty()) out_since_ = core::Clock::now();
  out_ += line;
  flush();
}

void CommandEnvironment::flush() {
  if (!proc_ || out_.empty()) return;
  core::Result<std::size_t> n = proc_->write_some(out_);
  if (!n.is_ok()) {
    broken("cannot be written to: " + n.status().message());
    return;
  }
  if (*n == 0) return;
  out_.erase(0, *n);
  written_ += *n;
  out_since_ = core::Clock::now();
}

void CommandEnvironment::poll() {
  if (!proc_) return;
  flush();
  if (!proc_) return;
  if (!out_.empty() && core::Clock::now() - out_since_ > options_.stall_timeout) {
    ++faults_.stalled;
    broken(fmt::format("took nothing written to it for {} ms", options_.stall_timeout.count()));
    return;
  }
  std::uint64_t overlong = 0;
  for (const std::string& line : proc_->drain_lines(options_.max_line, &overlong))
    take(line);
  if (overlong > 0) {
    faults_.overlong += overlong;
    fail_all(fmt::format("wrote {} line(s) over env_max_line_bytes ({} bytes)", overlong,
                         options_.max_line));
  }
  if (proc_ && (!pending_.empty() || !out_.empty()) && !proc_->running()) {
    auto code = proc_->wait(core::Millis(0));
    fail_all("exited" + (code.is_ok() ? " with status " + std::to_string(*code) : std::string()));
    proc_.reset();
    poller_.reset();
  }
}

void CommandEnvironment::take(const std::string& line) {
  auto garbage = [&](const std::string& why) {
    ++faults_.garbage;
    log::warn("environment: dropped an answer ({}): {}", why, line.substr(0, 200));
  };
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("episode") || !j["episode"].is_string()) {
    garbage("not a JSON object naming its episode");
    return;
  }
  const std::string id = j["episode"].get<std::string>();
  auto it = pending_.find(id);
  if (it == pending_.end() && forgotten_.erase(id) > 0) {
    // Its episode ended or left while the program was answering: nothing is wrong with it.
    log::debug("environment: dropped a late answer for episode {}", id);
    return;
  }
  if (it == pending_.end()) {
    garbage("no such episode pending");
    return;
  }
  Pending& p = it->second;
  const bool replaying = p.next + 1 < p.lines.size();
  const bool ends = j.contains("done") && j["done"].is_boolean() && j["done"].get<bool>();
  if (replaying && !j.contains("error") && !ends) {
    // A step of the replay was answered: the next goes (its answer is the recorded one).
    ++p.next;
    send(p.lines[p.next]);
    return;
  }
  Done done = std::move(p.done);
  pending_.erase(it);
  if (j.contains("error")) {
    done(core::Status(
        core::Code::kInternal,
        std::string(replaying ? "replaying the episode, " : "") + "it raised: " +
            (j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump())));
    return;
  }
  if (replaying) {
    done(core::unavailable("replaying the episode, it ended it before its recorded turns"));
    return;
  }
  EnvAnswer a;
  const json obs = j.value("observation", json());
  if (obs.is_array()) {
    for (const auto& e : obs) {
      if (!e.is_number_integer() || e.get<std::int64_t>() < 0 ||
          e.get<std::int64_t>() >= options_.vocab) {
        done(core::invalid_argument("its observation holds " + e.dump() +
                                    ", not a token id of the model's vocabulary"));
        return;
      }
      a.tokens.push_back(static_cast<std::int32_t>(e.get<std::int64_t>()));
    }
  } else if (j.contains("text") && j["text"].is_string()) {
    auto enc = rl::Tokenizer::encode(j["text"].get<std::string>());
    if (!enc.is_ok()) {
      done(enc.status());
      return;
    }
    a.tokens = std::move(enc).value();
  } else if (!obs.is_null()) {
    done(core::invalid_argument("its observation is neither token ids nor text"));
    return;
  }
  const json d = j.value("done", json(false));
  if (!d.is_boolean()) {
    done(core::invalid_argument("its 'done' is not true or false"));
    return;
  }
  a.done = d.get<bool>();
  if (j.contains("reward")) {
    if (!j["reward"].is_number() || !std::isfinite(j["reward"].get<double>())) {
      done(core::invalid_argument("its reward is not a finite number"));
      return;
    }
    a.reward = j["reward"].get<double>();
  }
  done(std::move(a));
}

void CommandEnvironment::broken(const std::string& why) {
  fail_all(why);
  // The destructor kills and reaps it; what was not written goes with it (never half a line to
  // a program that goes on).
  proc_.reset();
  poller_.reset();
  out_.clear();
  open_.clear();
}

void CommandEnvironment::fail_all(const std::string& why) {
  auto pending = std::move(pending_);
  pending_.clear();
  log::warn("environment {}: {}; ending its {} pending episodes", options_.argv[0], why,
            pending.size());
  // From the loop: answer() may be the caller, and its `done` never runs inside it.
  for (auto& [id, p] : pending) {
    loop_->post(
        [done = std::move(p.done), why] { done(core::unavailable("the environment " + why)); });
  }
}

}  // namespace sluice::rollout
