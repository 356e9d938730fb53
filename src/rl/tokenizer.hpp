// The character-level tokenizer of sluice's built-in tasks: a fixed vocabulary of 20 tokens, one
// per character. Token i is the character kVocabulary[i]; the three special tokens have printable
// stand-ins so that every token sequence decodes to a string and back:
//
//   0 PAD '_'   1 BOS '^'   2 EOS '$'   3..12 '0'..'9'   13 '+'  14 '-'  15 '*'  16 '='
//   17 ','  18 ':'  19 ' '
//
// The vocabulary is part of the model's contract (its embedding has kVocabSize rows), so it never
// changes order; new characters could only be appended (kVocabSize stays at most 32).
//
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace sluice::rl {

using Token = std::int32_t;  // the element type of Trajectory::prompt_tokens / response_tokens

class Tokenizer {
 public:
  static constexpr std::string_view kVocabulary = "_^$0123456789+-*=,: ";
  static constexpr int kVocabSize = static_cast<int>(kVocabulary.size());
  static constexpr Token kPad = 0;
  static constexpr Token kBos = 1;
  static constexpr Token kEos = 2;

  static constexpr int vocab_size() { return kVocabSize; }

  // The token of one character; an invalid_argument error for a character outside the vocabulary.
  static core::Result<Token> token(char c);

  // One token per character. The stand-ins '_', '^' and '$' encode to PAD, BOS and EOS. An
  // unknown character is an invalid_argument error that names it and its position.
  static core::Result<std::vector<Token>> encode(std::string_view text);

  // One character per token (PAD, BOS and EOS as '_', '^', '$'); an id outside [0, kVocabSize)
  // decodes as '?', so decode never fails (it is used to print what a model generated).
  static std::string decode(std::span<const Token> tokens);

  // The digit a token stands for, or -1 when the token is not a digit.
  static int digit_value(Token t);
  static Token digit_token(int digit);  // digit in [0, 9]
};

static_assert(Tokenizer::kVocabSize == 20 && Tokenizer::kVocabSize <= 32);

}  // namespace sluice::rl
