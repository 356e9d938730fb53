#include "rl/tokenizer.hpp"

#include <fmt/format.h>

namespace sluice::rl {

namespace {
constexpr Token kDigitZero = 3;

core::Status unknown_character(char c, std::string_view where) {
  return core::invalid_argument(fmt::format(
      "tokenizer: character '{}' (0x{:02x}){} is not in the vocabulary \"{}\"", c,
      static_cast<unsigned>(static_cast<unsigned char>(c)), where, Tokenizer::kVocabulary));
}
}  // namespace

core::Result<Token> Tokenizer::token(char c) {
  std::size_t pos = kVocabulary.find(c);
  if (pos == std::string_view::npos) return unknown_character(c, "");
  return static_cast<Token>(pos);
}

core::Result<std::vector<Token>> Tokenizer::encode(std::string_view text) {
  std::vector<Token> out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::size_t pos = kVocabulary.find(text[i]);
    if (pos == std::string_view::npos) {
      return unknown_character(text[i], fmt::format(" at position {}", i));
    }
    out.push_back(static_cast<Token>(pos));
  }
  return out;
}

std::string Tokenizer::decode(std::span<const Token> tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (Token t : tokens) {
    bool known = t >= 0 && t < kVocabSize;
    out.push_back(known ? kVocabulary[static_cast<std::size_t>(t)] : '?');
  }
  return out;
}

int Tokenizer::digit_value(Token t) {
  if (t < kDigitZero || t > kDigitZero + 9) return -1;
  return t - kDigitZero;
}

Token Tokenizer::digit_token(int digit) {
  return kDigitZero + digit;
}

}  // namespace sluice::rl
