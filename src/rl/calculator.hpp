// The built-in agentic task's tool: a calculator over the task's own characters. The model writes
// an expression of digits, '+', '-' and '*' ("123+45*6"); the environment evaluates it (products
// first, then sums and differences, left to right) and answers with the value's digits.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.hpp"

namespace sluice::rl {

struct CalculatorLimits {
  std::size_t max_chars = 64;                        // a longer expression is refused unread
  std::int64_t max_abs = 1'000'000'000'000'000'000;  // every operand, product and sum, in size
};

// The value of `expr`, or invalid_argument saying what is wrong and where: an empty expression,
// a character outside digits and + - *, an operator without an operand on each side, or a number
// or intermediate result beyond max_abs.
core::Result<std::int64_t> calculate(std::string_view expr, const CalculatorLimits& limits = {});

}  // namespace sluice::rl
