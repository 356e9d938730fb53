#include "rollout/command_env.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "core/log.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::rollout {

namespace log = core::log;
using nlohmann::json;

namespace {

// How often the environment's output is read while answers are pending.
constexpr core::Millis kPollPeriod{2};
// A line written to the environment waits at most this long for room in its stdin.
constexpr core::Millis kWriteWait{2000};

}  // namespace

core::Result<std::unique_ptr<CommandEnvironment>> CommandEnvironment::create(
    core::EventLoop& loop, CommandEnvOptions options) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return core::invalid_argument("env_command: no program");
  }
  if (options.vocab <= 0 || options.call_token < 0 || options.call_token >= options.vocab) {
    return core::invalid_argument("env_call_token must be a token id of the model's vocabulary");
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
  SLUICE_ASSIGN_OR_RETURN(proc_, core::Subprocess::spawn(o));
  poller_ = loop_->every(kPollPeriod, [this] { poll(); });
  log::info("environment: started {} (pid {})", options_.argv[0], proc_->pid());
  return {};
}

void CommandEnvironment::answer(const SequenceState& s, Done done) {
  const std::string& id = s.trajectory_id;
  if (!proc_ || !proc_->running()) {
    proc_.reset();
    if (core::Status st = start(); !st.is_ok()) {
      loop_->post([done, st] { done(st); });
      return;
    }
  }
  json msg;
  const bool fresh =
      std::find(s.loss_mask.begin(), s.loss_mask.end(), std::uint8_t{1}) == s.loss_mask.end();
  if (fresh) {
    msg = json{{"op", "reset"},
               {"episode", id},
               {"prompt", s.prompt_tokens},
               {"text", rl::Tokenizer::decode(s.prompt_tokens)}};
  } else {
    // The model's last turn: its tokens since the environment's last answer.
    std::size_t from = s.generated.size();
    while (from > 0 && s.loss_mask[from - 1] == 1)
      --from;
    std::vector<std::int32_t> action(s.generated.begin() + static_cast<std::ptrdiff_t>(from),
                                     s.generated.end());
    msg = json{{"op", "step"},
               {"episode", id},
               {"action", action},
               {"text", rl::Tokenizer::decode(action)}};
  }
  pending_[id] = std::move(done);
  if (core::Status st = proc_->write_stdin(msg.dump() + "\n", kWriteWait); !st.is_ok()) {
    fail_all("cannot be written to: " + st.message());
  }
}

void CommandEnvironment::poll() {
  if (!proc_) return;
  for (const std::string& line : proc_->drain_lines())
    take(line);
  if (!pending_.empty() && !proc_->running()) {
    auto code = proc_->wait(core::Millis(0));
    fail_all("exited" + (code.is_ok() ? " with status " + std::to_string(*code) : std::string()));
    proc_.reset();
    poller_.reset();
  }
}

void CommandEnvironment::take(const std::string& line) {
  auto garbage = [&](const std::string& why) {
    ++garbage_;
    log::warn("environment: dropped an answer ({}): {}", why, line.substr(0, 200));
  };
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("episode") || !j["episode"].is_string()) {
    garbage("not a JSON object naming its episode");
    return;
  }
  auto it = pending_.find(j["episode"].get<std::string>());
  if (it == pending_.end()) {
    garbage("no such episode pending");
    return;
  }
  Done done = std::move(it->second);
  pending_.erase(it);
  if (j.contains("error")) {
    done(core::Status(core::Code::kInternal,
                      "it raised: " + (j["error"].is_string() ? j["error"].get<std::string>()
                                                              : j["error"].dump())));
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

void CommandEnvironment::fail_all(const std::string& why) {
  auto pending = std::move(pending_);
  pending_.clear();
  log::warn("environment {}: {}; ending its {} pending episodes", options_.argv[0], why,
            pending.size());
  // From the loop: answer() may be the caller, and its `done` never runs inside it.
  for (auto& [id, done] : pending) {
    loop_->post(
        [done = std::move(done), why] { done(core::unavailable("the environment " + why)); });
  }
}

}  // namespace sluice::rollout
