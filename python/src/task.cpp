// sluice._sluice's ArithmeticTask: the arithmetic task's prompts, tokenizer and rewards.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "common.hpp"
#include "core/config.hpp"
#include "rl/task.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::python {

namespace {

std::vector<rl::Token> tokens_of(const std::vector<std::int64_t>& v) {
  std::vector<rl::Token> out;
  out.reserve(v.size());
  for (auto t : v) {
    if (t < 0 || t >= rl::Tokenizer::kVocabSize)
      throw py::value_error("token " + std::to_string(t) + " is outside the vocabulary");
    out.push_back(static_cast<rl::Token>(t));
  }
  return out;
}

// A prompt given as token ids from Python; errors raise as value() raises them.
rl::Prompt prompt_of(const std::vector<std::int64_t>& prompt_tokens) {
  return value(rl::ArithmeticTask::parse_prompt(tokens_of(prompt_tokens)));
}

rl::ArithmeticTask make_task(const py::object& config) {
  rl::TaskConfig tc;
  if (!config.is_none()) {
    std::string text = py::str(py::module_::import("json").attr("dumps")(config));
    auto j = value(core::config::parse_json_text(text, "task"));
    check(core::config::parse(j, tc));
  }
  return value(rl::ArithmeticTask::create(tc));
}

}  // namespace

void bind_task(py::module_& m) {
  py::class_<rl::ArithmeticTask>(m, "ArithmeticTask")
      .def(py::init(&make_task), py::arg("config") = py::none())
      .def_property_readonly_static("vocab_size",
                                    [](py::object) { return rl::Tokenizer::kVocabSize; })
      .def_property_readonly_static("pad", [](py::object) { return rl::Tokenizer::kPad; })
      .def_property_readonly_static("bos", [](py::object) { return rl::Tokenizer::kBos; })
      .def_property_readonly_static("eos", [](py::object) { return rl::Tokenizer::kEos; })
      .def_property_readonly("max_prompt_tokens", &rl::ArithmeticTask::max_prompt_tokens)
      .def_property_readonly("max_response_tokens", &rl::ArithmeticTask::max_response_tokens)
      .def(
          "train_prompt",
          [](const rl::ArithmeticTask& t, std::uint64_t i) {
            auto p = value(t.train_prompt(i));
            return py::make_tuple(p.id, p.text, p.tokens);
          },
          py::arg("index"))
      .def(
          "heldout_prompt",
          [](const rl::ArithmeticTask& t, std::uint64_t i) {
            auto p = value(t.heldout_prompt(i));
            return py::make_tuple(p.id, p.text, p.tokens);
          },
          py::arg("index"))
      .def(
          "solution",
          [](const rl::ArithmeticTask& t, const std::vector<std::int64_t>& prompt) {
            return t.solution(prompt_of(prompt));
          },
          py::arg("prompt_tokens"))
      .def(
          "reward",
          [](const rl::ArithmeticTask& t, const std::vector<std::int64_t>& prompt,
             const std::vector<std::int64_t>& response) {
            return t.reward(prompt_of(prompt), tokens_of(response));
          },
          py::arg("prompt_tokens"), py::arg("response"))
      .def(
          "correct",
          [](const rl::ArithmeticTask& t, const std::vector<std::int64_t>& prompt,
             const std::vector<std::int64_t>& response) {
            return t.correct(prompt_of(prompt), tokens_of(response));
          },
          py::arg("prompt_tokens"), py::arg("response"))
      .def_static(
          "decode",
          [](const std::vector<std::int64_t>& tokens) {
            return rl::Tokenizer::decode(tokens_of(tokens));
          },
          py::arg("tokens"))
      .def_static(
          "encode", [](const std::string& text) { return value(rl::Tokenizer::encode(text)); },
          py::arg("text"));
}

}  // namespace sluice::python
