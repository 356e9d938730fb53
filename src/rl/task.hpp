// The built-in task with a verifiable reward: running sums.
//
// A prompt is a sum of k small numbers and the response writes every running sum, the last one
// being the answer, then EOS:
//
//   prompt   ^7+3+8+5=        (BOS, the terms joined by '+', then '=')
//   response 10,18,23$        (the k-1 running sums joined by ',', then EOS)
//
// The response has k-1 numbers, so its length grows with k, and k is drawn from a lognormal
// distribution given by its median and its 99th percentile, truncated to [min_terms, max_terms]:
// with the defaults the response length has p50 6 tokens and p99 36 (max 45, over 10,000 prompts),
// the long tail of reasoning RL that sluice's scheduling is about. Prompt plus response always fit
// `context_tokens`; create() checks the worst case.
//
// Prompts are a deterministic function of (seed, stream, index). The train/held-out split is
// decided by a hash of the prompt text alone (not of the seed or the index), so a prompt is on
// the same side of the split for every seed and every index, and the training stream never
// produces a held-out prompt: "held-out accuracy" is accuracy on prompts never trained on.
//
// Reward: 1.0 when the response is well formed and its final number is the answer; otherwise
// partial_credit x (the fraction of the k-1 running sums that are right) when the response is
// well formed, and 0 when it is not. Well formed means: exactly k-1 numbers (decimal, no leading
// zero, at most 4 digits) separated by single ',' and followed by one EOS, which is the last
// token. With the default partial_credit = 0 the reward is binary. correct() (what accuracy
// counts) is true only for the full reward.
//
// The tool form (tool = "calc"), the built-in agentic task: before it answers, the model may call
// a calculator (rl/calculator.hpp). A call is an expression followed by '=', which ends the model's
// turn; the environment answers with the value and a space (':' and a space when the expression
// does not evaluate), and the model's next turn goes on from there:
//
//   prompt   ^37+48+95=
//   response 37+48+95=180 180$    model "37+48+95=", environment "180 ", model "180$"
//
// After a call the answer is one number then EOS; without a call it is the running sums as above.
// Reward in the tool form: 1 when the response ends in EOS and its answer (the last number) is
// right, else partial credit on the running sums as above when there was no call, else 0. An
// episode has at most max_turns model turns: a call in the last is not answered (the episode ends
// there, unrewarded). The warm start shows the tool on a share `tool_demos` of its solutions,
// drawn at random, so RL has to learn where a call pays.
//
// Thread safety: ArithmeticTask is immutable after create(); its const methods may be called from
// any number of threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "rl/length_stats.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::rl {

struct TaskConfig {
  std::uint64_t seed = 1;             // the prompt streams' seed
  std::uint32_t min_terms = 2;        // fewest terms in a prompt (>= 2: one running sum at least)
  std::uint32_t max_terms = 16;       // most terms in a prompt (>= min_terms)
  double median_terms = 3.0;          // median of the lognormal term count, in [min, max] terms
  double p99_terms = 14.0;            // its 99th percentile (>= median_terms): the tail parameter
  std::uint32_t max_operand = 9;      // terms are uniform in [0, max_operand], 1..99
  double heldout_fraction = 0.1;      // share of prompt texts held out, in [0, 0.5]
  double partial_credit = 0.0;        // reward scale for right running sums, in [0, 1)
  std::uint32_t context_tokens = 96;  // prompt + response must fit (checked for the worst case)
  std::string tool = "none";          // "calc": the model may call a calculator; "none"
  std::uint32_t max_turns = 3;        // tool form: model turns at most, in [2, kMaxTurns]
  double tool_demos = 0.25;           // tool form: share of warm-start solutions that call

  template <typename V>
  void describe(V& v) {
    v("seed", seed, "seed of the prompt streams (default 1)");
    v("min_terms", min_terms, "fewest terms in a prompt, at least 2 (default 2)");
    v("max_terms", max_terms, "most terms in a prompt (default 16)");
    v("median_terms", median_terms, "median of the lognormal number of terms (default 3)");
    v("p99_terms", p99_terms,
      "99th percentile of the number of terms, the long-tail parameter (default 14)");
    v("max_operand", max_operand, "terms are drawn uniformly from 0..max_operand (default 9)");
    v("heldout_fraction", heldout_fraction,
      "share of prompt texts held out of training, by hash of the text (default 0.1)");
    v("partial_credit", partial_credit,
      "reward scale for right running sums when the answer is wrong, 0 = binary (default 0)");
    v("context_tokens", context_tokens, "prompt + response must fit this many tokens (default 96)");
    v("tool", tool,
      "calc: the model may call a calculator, an expression then '=' (multi-turn episodes); none: "
      "one turn (default none)");
    v("max_turns", max_turns, "tool calc: model turns per episode at most, at least 2 (default 3)");
    v("tool_demos", tool_demos,
      "tool calc: share of the warm start's gold solutions that call the tool (default 0.25)");
  }
  // Checks the ranges above (the context check needs the task: see ArithmeticTask::create).
  core::Status validate() const;
};

// One prompt of the task.
struct Prompt {
  std::string id;             // "train-<index>" or "heldout-<index>"; empty when parsed
  std::vector<int> terms;     // k >= 2 terms
  std::string text;           // "7+3+8+5=" (no BOS)
  std::vector<Token> tokens;  // BOS followed by the text's tokens: what the model is given
  int answer() const;         // the sum of the terms
};

// A gold solution in the tool form: the response tokens and, per token, 1 for the model's and 0
// for the environment's.
struct ToolSolution {
  std::vector<Token> tokens;
  std::vector<std::uint8_t> mask;
};

class ArithmeticTask {
 public:
  // Validates the configuration, including that the longest possible prompt plus its longest
  // possible response fit context_tokens.
  static core::Result<ArithmeticTask> create(const TaskConfig& config);

  const TaskConfig& config() const { return config_; }

  // The index-th prompt of the training stream: never a held-out prompt. Fails (internal) only
  // when the configuration leaves almost no training prompts (e.g. a tiny operand range).
  core::Result<Prompt> train_prompt(std::uint64_t index) const;
  // The index-th prompt of the held-out stream: always a held-out prompt. Fails
  // (failed_precondition) when heldout_fraction is 0.
  core::Result<Prompt> heldout_prompt(std::uint64_t index) const;
  // Whether a prompt text ("7+3=") is on the held-out side of the split.
  bool is_heldout(std::string_view text) const;

  // The gold response: running sums, then EOS (for the supervised warm start).
  std::vector<Token> solution(const Prompt& prompt) const;

  // ---- the tool form (see the header comment) ----
  bool uses_tool() const { return config_.tool == "calc"; }
  // The token that ends a model turn with a call ('=').
  static Token call_token();
  // Whether the model's turn that produced `response` (episode so far) ended with a call.
  bool ends_with_call(std::span<const Token> response) const;
  // The environment's answer to the call that ends `response`: the value of the expression since
  // the environment's last answer (or the response's start) and a space, or ':' and a space when
  // it does not evaluate. invalid_argument when the response does not end with a call.
  core::Result<std::vector<Token>> tool_answer(std::span<const Token> response) const;
  // The gold response that calls the tool once, then answers.
  ToolSolution tool_solution(const Prompt& prompt) const;
  // Whether the warm start's index-th solution shows the tool (a share tool_demos of them).
  bool demo_uses_tool(std::uint64_t index) const;
  // The reward of a response (see the header comment) and whether it is fully right.
  double reward(const Prompt& prompt, std::span<const Token> response) const;
  bool correct(const Prompt& prompt, std::span<const Token> response) const;

  // Rebuilds a prompt from its tokens (BOS, terms joined by '+', '='), e.g. from a Trajectory's
  // prompt_tokens, so a reward can be computed from a trajectory alone. Malformed tokens are an
  // invalid_argument error.
  static core::Result<Prompt> parse_prompt(std::span<const Token> prompt_tokens);

  // The response-length distribution (in tokens, EOS included) of the gold solutions of the first
  // n prompts of the training stream (n >= 1).
  core::Result<LengthStats> response_lengths(std::uint64_t n) const;

  // The longest possible prompt (BOS included) and response (EOS included) for this config.
  std::uint32_t max_prompt_tokens() const;
  std::uint32_t max_response_tokens() const;

 private:
  explicit ArithmeticTask(const TaskConfig& config);
  Prompt draw(std::uint64_t stream, std::uint64_t index, std::uint64_t attempt) const;

  TaskConfig config_;
  double log_median_ = 0.0;  // lognormal parameters of the number of terms
  double sigma_ = 0.0;
};

}  // namespace sluice::rl
