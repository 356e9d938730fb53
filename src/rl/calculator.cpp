#include "rl/calculator.hpp"

#include <fmt/format.h>

#include <string>

namespace sluice::rl {

namespace {

bool is_op(char c) {
  return c == '+' || c == '-' || c == '*';
}

}  // namespace

core::Result<std::int64_t> calculate(std::string_view expr, const CalculatorLimits& limits) {
  auto bad = [&](const std::string& what) {
    return core::invalid_argument(fmt::format("calculator: '{}': {}", expr, what));
  };
  if (expr.size() > limits.max_chars) {
    return core::invalid_argument(fmt::format("calculator: an expression of {} characters, over {}",
                                              expr.size(), limits.max_chars));
  }
  if (expr.empty()) return bad("empty");
  const std::int64_t cap = limits.max_abs;
  // sum of finished terms, the running product of this term, and the sign of this term.
  std::int64_t sum = 0, term = 0;
  int sign = 1;
  bool have_term = false;
  std::size_t i = 0;
  while (true) {
    if (i >= expr.size() || !(expr[i] >= '0' && expr[i] <= '9')) {
      if (i < expr.size() && !is_op(expr[i]))
        return bad(fmt::format("'{}' at {} is not a digit or + - *", expr[i], i));
      return bad(fmt::format("an operator at {} without an operand before it", i));
    }
    std::int64_t n = 0;
    for (; i < expr.size() && expr[i] >= '0' && expr[i] <= '9'; ++i) {
      n = n * 10 + (expr[i] - '0');
      if (n > cap) return bad(fmt::format("a number beyond {} at {}", cap, i));
    }
    if (!have_term) {
      term = n;
      have_term = true;
    } else {
      if (n != 0 && (term > cap / n || term < -cap / n))
        return bad(fmt::format("a product beyond {} at {}", cap, i));
      term *= n;
    }
    if (i == expr.size() || expr[i] != '*') {
      sum += sign * term;
      if (sum > cap || sum < -cap) return bad(fmt::format("a sum beyond {} at {}", cap, i));
      have_term = false;
    }
    if (i == expr.size()) return sum;
    const char op = expr[i];
    if (!is_op(op)) return bad(fmt::format("'{}' at {} is not a digit or + - *", op, i));
    if (op == '+') sign = 1;
    if (op == '-') sign = -1;
    ++i;
    if (i == expr.size()) return bad(fmt::format("'{}' at the end without an operand", op));
  }
}

}  // namespace sluice::rl
