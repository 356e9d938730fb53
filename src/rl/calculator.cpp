#include "rl/calculator.hpp"

#include <fmt/format.h>

#include <algorithm>
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
  const std::int64_t cap = std::max<std::int64_t>(limits.max_abs, 0);
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
    // Every step is checked before it could overflow: the operands are the model's, a cap may
    // be as large as int64 holds, and a 19-digit number already passes it.
    std::int64_t n = 0;
    for (; i < expr.size() && expr[i] >= '0' && expr[i] <= '9'; ++i) {
      const std::int64_t digit = expr[i] - '0';
      if (n > (cap - digit) / 10) return bad(fmt::format("a number beyond {} at {}", cap, i));
      n = n * 10 + digit;
    }
    if (!have_term) {
      term = n;
      have_term = true;
    } else {
      std::int64_t product = 0;
      if (__builtin_mul_overflow(term, n, &product) || product > cap) {
        return bad(fmt::format("a product beyond {} at {}", cap, i));
      }
      term = product;
    }
    if (i == expr.size() || expr[i] != '*') {
      // term lies in [0, cap], so its sign never wraps; the sum may, where cap is near int64's
      // bound.
      std::int64_t next = 0;
      if (__builtin_add_overflow(sum, sign * term, &next) || next > cap || next < -cap) {
        return bad(fmt::format("a sum beyond {} at {}", cap, i));
      }
      sum = next;
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
