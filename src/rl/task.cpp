#include "rl/task.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/checksum.hpp"
#include "core/splitmix.hpp"
#include "rl/calculator.hpp"
#include "rl/trajectory.hpp"

namespace sluice::rl {

namespace {

// The 99th percentile of the standard normal distribution.
constexpr double kZ99 = 2.3263478740408408;
constexpr double kTwoPi = 6.283185307179586;
// Stream tags, so the training and held-out streams are independent draws.
constexpr std::uint64_t kTrainStream = 0x747261696e;  // "train"
constexpr std::uint64_t kHeldoutStream = 0x68656c64;  // "held"
// Draws before giving up on finding a prompt on the wanted side of the split. With the allowed
// held-out fractions (<= 0.5) a training prompt needs 2 draws on average; a held-out prompt
// needs 1 / heldout_fraction.
constexpr std::uint64_t kMaxDraws = 100000;
// Lognormal draws outside [min_terms, max_terms] are redrawn this many times, then clamped.
constexpr int kMaxTermDraws = 64;
constexpr std::size_t kMaxNumberDigits = 4;
// Stream tag of the warm start's choice of tool demonstrations.
constexpr std::uint64_t kDemoStream = 0x64656d6f;  // "demo"

using core::mix64;

class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream, std::uint64_t index, std::uint64_t attempt) {
    for (std::uint64_t v : {seed, stream, index, attempt})
      state_ = mix64(state_ + core::kSplitMixGamma + v);
  }
  std::uint64_t next() { return core::splitmix64(state_); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n].
  int uniform_int(int n) {
    return std::min(n, static_cast<int>(uniform() * static_cast<double>(n + 1)));
  }
  // Standard normal (Box-Muller).
  double normal() {
    double u1 = 1.0 - uniform();  // in (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
  }

 private:
  std::uint64_t state_ = 0;
};

std::uint32_t decimal_digits(long value) {
  std::uint32_t d = 1;
  while (value >= 10) {
    value /= 10;
    ++d;
  }
  return d;
}

Prompt make_prompt(std::string id, std::vector<int> terms) {
  Prompt p;
  p.id = std::move(id);
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (i > 0) p.text += '+';
    p.text += std::to_string(terms[i]);
  }
  p.text += '=';
  p.terms = std::move(terms);
  p.tokens.push_back(Tokenizer::kBos);
  // The text holds only digits, '+' and '=', all in the vocabulary.
  auto body = Tokenizer::encode(p.text).value();
  p.tokens.insert(p.tokens.end(), body.begin(), body.end());
  return p;
}

std::vector<int> running_sums(const Prompt& prompt) {
  std::vector<int> sums;
  int s = prompt.terms.empty() ? 0 : prompt.terms[0];
  for (std::size_t i = 1; i < prompt.terms.size(); ++i) {
    s += prompt.terms[i];
    sums.push_back(s);
  }
  return sums;
}

// Parses "n,n,...,n" EOS into numbers; false when the response is not well formed (the number
// count is checked by the caller).
bool parse_response(std::span<const Token> response, std::vector<int>& numbers) {
  numbers.clear();
  if (response.empty() || response.back() != Tokenizer::kEos) return false;
  const Token comma = Tokenizer::token(',').value();
  std::size_t digits = 0;
  int value = 0;
  for (std::size_t i = 0; i + 1 < response.size(); ++i) {
    Token t = response[i];
    if (t == comma) {
      if (digits == 0) return false;
      numbers.push_back(value);
      digits = 0;
      value = 0;
      continue;
    }
    int d = Tokenizer::digit_value(t);
    if (d < 0) return false;  // an operator, a space or a special token (EOS, BOS, PAD)
    if (digits > 0 && value == 0) return false;  // a leading zero
    if (digits == kMaxNumberDigits) return false;
    value = value * 10 + d;
    ++digits;
  }
  if (digits == 0) return false;  // empty response or a trailing ','
  numbers.push_back(value);
  return true;
}

}  // namespace

core::Status TaskConfig::validate() const {
  if (min_terms < 2) {
    return core::invalid_argument(
        fmt::format("task: min_terms is {}, must be at least 2", min_terms));
  }
  if (max_terms < min_terms) {
    return core::invalid_argument(
        fmt::format("task: max_terms ({}) is below min_terms ({})", max_terms, min_terms));
  }
  if (!(median_terms >= min_terms && median_terms <= max_terms)) {
    return core::invalid_argument(fmt::format("task: median_terms ({}) must lie in [{}, {}]",
                                              median_terms, min_terms, max_terms));
  }
  if (!(p99_terms >= median_terms) || !std::isfinite(p99_terms)) {
    return core::invalid_argument(fmt::format(
        "task: p99_terms ({}) must be at least median_terms ({})", p99_terms, median_terms));
  }
  if (max_operand < 1 || max_operand > 99) {
    return core::invalid_argument(
        fmt::format("task: max_operand is {}, must be in [1, 99]", max_operand));
  }
  if (!(heldout_fraction >= 0.0 && heldout_fraction <= 0.5)) {
    return core::invalid_argument(
        fmt::format("task: heldout_fraction is {}, must be in [0, 0.5]", heldout_fraction));
  }
  if (!(partial_credit >= 0.0 && partial_credit < 1.0)) {
    return core::invalid_argument(
        fmt::format("task: partial_credit is {}, must be in [0, 1)", partial_credit));
  }
  if (tool != "none" && tool != "calc") {
    return core::invalid_argument(fmt::format("task: tool is '{}', must be none or calc", tool));
  }
  if (max_turns < 2 || max_turns > kMaxTurns) {
    return core::invalid_argument(
        fmt::format("task: max_turns is {}, must be in [2, {}]", max_turns, kMaxTurns));
  }
  if (!(tool_demos >= 0.0 && tool_demos <= 1.0)) {
    return core::invalid_argument(
        fmt::format("task: tool_demos is {}, must be in [0, 1]", tool_demos));
  }
  return {};
}

int Prompt::answer() const {
  return std::accumulate(terms.begin(), terms.end(), 0);
}

ArithmeticTask::ArithmeticTask(const TaskConfig& config)
    : config_(config),
      log_median_(std::log(config.median_terms)),
      sigma_(std::log(config.p99_terms / config.median_terms) / kZ99) {}

core::Result<ArithmeticTask> ArithmeticTask::create(const TaskConfig& config) {
  SLUICE_TRY(config.validate());
  ArithmeticTask task(config);
  std::uint64_t need =
      std::uint64_t{task.max_prompt_tokens()} + std::uint64_t{task.max_response_tokens()};
  if (need > config.context_tokens) {
    return core::invalid_argument(fmt::format(
        "task: {} terms up to {} need {} tokens ({} prompt + {} response), context_tokens is {}",
        config.max_terms, config.max_operand, need, task.max_prompt_tokens(),
        task.max_response_tokens(), config.context_tokens));
  }
  return task;
}

std::uint32_t ArithmeticTask::max_prompt_tokens() const {
  // BOS, the terms, k-1 '+', '='.
  std::uint32_t k = config_.max_terms;
  return 1 + k * decimal_digits(config_.max_operand) + (k - 1) + 1;
}

std::uint32_t ArithmeticTask::max_response_tokens() const {
  // k-1 running sums, k-2 ',', EOS; every sum at its largest.
  std::uint32_t k = config_.max_terms;
  std::uint32_t n = (k - 2) + 1;
  for (std::uint32_t i = 2; i <= k; ++i)
    n += decimal_digits(static_cast<long>(i) * config_.max_operand);
  if (!uses_tool()) return n;
  // The tool form: up to max_turns - 1 calls of the prompt's expression ('=' included) answered
  // by the largest sum and a space, then that sum and EOS.
  const std::uint32_t sum = decimal_digits(static_cast<long>(k) * config_.max_operand);
  const std::uint32_t call = (max_prompt_tokens() - 1) + sum + 1;
  return std::max(n, (config_.max_turns - 1) * call + sum + 1);
}

Prompt ArithmeticTask::draw(std::uint64_t stream, std::uint64_t index,
                            std::uint64_t attempt) const {
  Rng rng(config_.seed, stream, index, attempt);
  const double lo = config_.min_terms;
  const double hi = config_.max_terms;
  double k = 0.0;
  for (int i = 0; i < kMaxTermDraws; ++i) {
    k = std::round(std::exp(log_median_ + sigma_ * rng.normal()));
    if (k >= lo && k <= hi) break;
  }
  k = std::clamp(k, lo, hi);
  std::vector<int> terms(static_cast<std::size_t>(k));
  for (int& t : terms)
    t = rng.uniform_int(static_cast<int>(config_.max_operand));
  std::string id = fmt::format("{}-{}", stream == kTrainStream ? "train" : "heldout", index);
  return make_prompt(std::move(id), std::move(terms));
}

bool ArithmeticTask::is_heldout(std::string_view text) const {
  // Only the text decides, so the split is the same for every seed and index.
  std::uint64_t h = core::chunk_checksum(text.data(), text.size());
  return static_cast<double>(h >> 11) * 0x1.0p-53 < config_.heldout_fraction;
}

core::Result<Prompt> ArithmeticTask::train_prompt(std::uint64_t index) const {
  for (std::uint64_t attempt = 0; attempt < kMaxDraws; ++attempt) {
    Prompt p = draw(kTrainStream, index, attempt);
    if (!is_heldout(p.text)) return p;
  }
  return core::internal_error(fmt::format(
      "task: no training prompt in {} draws for index {} (heldout_fraction {} leaves too few)",
      kMaxDraws, index, config_.heldout_fraction));
}

core::Result<Prompt> ArithmeticTask::heldout_prompt(std::uint64_t index) const {
  if (config_.heldout_fraction <= 0.0) {
    return core::failed_precondition("task: heldout_fraction is 0, there are no held-out prompts");
  }
  for (std::uint64_t attempt = 0; attempt < kMaxDraws; ++attempt) {
    Prompt p = draw(kHeldoutStream, index, attempt);
    if (is_heldout(p.text)) return p;
  }
  return core::internal_error(
      fmt::format("task: no held-out prompt in {} draws for index {}", kMaxDraws, index));
}

std::vector<Token> ArithmeticTask::solution(const Prompt& prompt) const {
  std::string text;
  for (int s : running_sums(prompt)) {
    if (!text.empty()) text += ',';
    text += std::to_string(s);
  }
  std::vector<Token> out = Tokenizer::encode(text).value();  // digits and ',' only
  out.push_back(Tokenizer::kEos);
  return out;
}

namespace {

const Token kSpace = Tokenizer::token(' ').value();

bool has_call(std::span<const Token> response) {
  return std::find(response.begin(), response.end(), ArithmeticTask::call_token()) !=
         response.end();
}

// The tool form's answer after a call: the response ends with one number (no leading zero) and
// EOS after the environment's last answer, and the number is the sum.
bool tool_answer_right(const Prompt& prompt, std::span<const Token> response) {
  if (response.size() < 2 || response.back() != Tokenizer::kEos) return false;
  auto last_space = std::find(response.rbegin(), response.rend(), kSpace);
  if (last_space == response.rend()) return false;  // a call never answered
  const auto start = static_cast<std::size_t>(response.rend() - last_space);
  long value = 0;
  std::size_t digits = 0;
  for (std::size_t i = start; i + 1 < response.size(); ++i) {
    const int d = Tokenizer::digit_value(response[i]);
    if (d < 0 || (digits > 0 && value == 0) || digits == 9) return false;
    value = value * 10 + d;
    ++digits;
  }
  return digits > 0 && value == prompt.answer();
}

}  // namespace

Token ArithmeticTask::call_token() {
  return Tokenizer::token('=').value();
}

bool ArithmeticTask::ends_with_call(std::span<const Token> response) const {
  return uses_tool() && !response.empty() && response.back() == call_token();
}

core::Result<std::vector<Token>> ArithmeticTask::tool_answer(
    std::span<const Token> response) const {
  if (!ends_with_call(response)) {
    return core::invalid_argument("task: the response does not end with a call ('=')");
  }
  // The expression: the model's tokens since the environment's last answer.
  auto from = std::find(response.rbegin() + 1, response.rend(), kSpace);
  const auto start = static_cast<std::size_t>(response.rend() - from);
  const std::string expr = Tokenizer::decode(response.subspan(start, response.size() - 1 - start));
  std::string answer = ": ";
  if (auto v = calculate(expr); v.is_ok()) answer = std::to_string(*v) + " ";
  // A negative value's '-' and the digits are in the vocabulary.
  return Tokenizer::encode(answer).value();
}

ToolSolution ArithmeticTask::tool_solution(const Prompt& prompt) const {
  ToolSolution s;
  // The model copies the prompt's expression and calls, ...
  std::vector<Token> call(prompt.tokens.begin() + 1, prompt.tokens.end());
  s.tokens = call;
  s.mask.assign(call.size(), 1);
  // ... the environment answers, ...
  std::vector<Token> answer = tool_answer(s.tokens).value();
  s.tokens.insert(s.tokens.end(), answer.begin(), answer.end());
  s.mask.insert(s.mask.end(), answer.size(), 0);
  // ... and the model copies the value and ends.
  std::vector<Token> final = Tokenizer::encode(std::to_string(prompt.answer())).value();
  final.push_back(Tokenizer::kEos);
  s.tokens.insert(s.tokens.end(), final.begin(), final.end());
  s.mask.insert(s.mask.end(), final.size(), 1);
  return s;
}

bool ArithmeticTask::demo_uses_tool(std::uint64_t index) const {
  if (!uses_tool()) return false;
  Rng rng(config_.seed, kDemoStream, index, 0);
  return rng.uniform() < config_.tool_demos;
}

double ArithmeticTask::reward(const Prompt& prompt, std::span<const Token> response) const {
  if (uses_tool() && has_call(response)) return tool_answer_right(prompt, response) ? 1.0 : 0.0;
  std::vector<int> numbers;
  std::vector<int> gold = running_sums(prompt);
  if (gold.empty() || !parse_response(response, numbers) || numbers.size() != gold.size()) {
    return 0.0;
  }
  if (numbers.back() == gold.back()) return 1.0;
  std::size_t right = 0;
  for (std::size_t i = 0; i < gold.size(); ++i)
    right += numbers[i] == gold[i] ? 1 : 0;
  return config_.partial_credit * static_cast<double>(right) / static_cast<double>(gold.size());
}

bool ArithmeticTask::correct(const Prompt& prompt, std::span<const Token> response) const {
  if (uses_tool() && has_call(response)) return tool_answer_right(prompt, response);
  std::vector<int> numbers;
  std::vector<int> gold = running_sums(prompt);
  return !gold.empty() && parse_response(response, numbers) && numbers.size() == gold.size() &&
         numbers.back() == gold.back();
}

core::Result<Prompt> ArithmeticTask::parse_prompt(std::span<const Token> prompt_tokens) {
  auto bad = [&](std::string_view why) {
    return core::invalid_argument(
        fmt::format("task: prompt \"{}\" {}", Tokenizer::decode(prompt_tokens), why));
  };
  if (prompt_tokens.empty() || prompt_tokens.front() != Tokenizer::kBos) {
    return bad("does not start with BOS");
  }
  if (prompt_tokens.size() < 2 || prompt_tokens.back() != Tokenizer::token('=').value()) {
    return bad("does not end with '='");
  }
  const Token plus = Tokenizer::token('+').value();
  std::vector<int> terms;
  std::size_t digits = 0;
  int value = 0;
  for (std::size_t i = 1; i + 1 < prompt_tokens.size(); ++i) {
    Token t = prompt_tokens[i];
    if (t == plus) {
      if (digits == 0) return bad("has an empty term");
      terms.push_back(value);
      digits = 0;
      value = 0;
      continue;
    }
    int d = Tokenizer::digit_value(t);
    if (d < 0) return bad("has a token that is neither a digit nor '+'");
    if (++digits > kMaxNumberDigits) return bad("has a term that is too long");
    value = value * 10 + d;
  }
  if (digits == 0) return bad("has an empty term");
  terms.push_back(value);
  if (terms.size() < 2) return bad("has fewer than 2 terms");
  Prompt p = make_prompt("", std::move(terms));
  if (p.tokens.size() != prompt_tokens.size()) return bad("has a term with a leading zero");
  return p;
}

core::Result<LengthStats> ArithmeticTask::response_lengths(std::uint64_t n) const {
  if (n == 0) return core::invalid_argument("task: response_lengths needs at least one prompt");
  std::vector<std::uint64_t> lengths;
  lengths.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    SLUICE_ASSIGN_OR_RETURN(Prompt p, train_prompt(i));
    lengths.push_back(solution(p).size());
  }
  return summarize_lengths(std::move(lengths));
}

}  // namespace sluice::rl
