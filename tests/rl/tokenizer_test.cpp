#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rl/tokenizer.hpp"

using sluice::rl::Token;
using sluice::rl::Tokenizer;

TEST_SUITE("rl.tokenizer") {
  TEST_CASE("every character of the vocabulary round-trips and has its own token") {
    CHECK(Tokenizer::vocab_size() == 20);
    CHECK(Tokenizer::vocab_size() <= 32);
    auto all = Tokenizer::encode(Tokenizer::kVocabulary);
    REQUIRE(all.is_ok());
    REQUIRE(all->size() == Tokenizer::kVocabulary.size());
    for (std::size_t i = 0; i < all->size(); ++i)
      CHECK((*all)[i] == static_cast<Token>(i));
    CHECK(Tokenizer::decode(*all) == Tokenizer::kVocabulary);

    const std::string text = "^7+3+8+5=10,18,23$";
    auto tokens = Tokenizer::encode(text);
    REQUIRE(tokens.is_ok());
    CHECK(tokens->front() == Tokenizer::kBos);
    CHECK(tokens->back() == Tokenizer::kEos);
    CHECK(Tokenizer::decode(*tokens) == text);
  }

  TEST_CASE("special tokens, digits and out-of-range ids") {
    CHECK(Tokenizer::decode(
              std::vector<Token>{Tokenizer::kPad, Tokenizer::kBos, Tokenizer::kEos}) == "_^$");
    for (int d = 0; d <= 9; ++d) {
      CHECK(Tokenizer::digit_value(Tokenizer::digit_token(d)) == d);
      CHECK(Tokenizer::decode(std::vector<Token>{Tokenizer::digit_token(d)}) == std::to_string(d));
    }
    CHECK(Tokenizer::digit_value(Tokenizer::kEos) == -1);
    CHECK(Tokenizer::digit_value(Tokenizer::token('+').value()) == -1);
    CHECK(Tokenizer::decode(std::vector<Token>{-1, 20, 5}) == "??2");
  }

  TEST_CASE("a character outside the vocabulary is an error that names it") {
    auto r = Tokenizer::encode("1+x=");
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == sluice::core::Code::kInvalidArgument);
    CHECK(r.status().message().find("'x'") != std::string::npos);
    CHECK(r.status().message().find("position 2") != std::string::npos);
    CHECK_FALSE(Tokenizer::token('A').is_ok());
  }
}
