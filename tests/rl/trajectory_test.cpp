// Trajectories as they travel (JSON): an episode's turns, loss mask and token versions.
#include <doctest/doctest.h>

#include "rl/trajectory.hpp"

using namespace sluice;
using rl::Trajectory;

namespace {

// Two model turns with an environment answer between them: "calc(3+4)" "=7" "7$".
Trajectory episode() {
  Trajectory t;
  t.id = "p3/0";
  t.prompt_id = "p3";
  t.version = 4;
  t.versions = {4, 5};
  t.prompt_tokens = {1, 2, 3};
  t.response_tokens = {10, 11, 12, 30, 31, 20, 21};
  t.logprobs = {-0.5f, -0.25f, -1.0f, 0.0f, 0.0f, -0.125f, -2.0f};
  t.loss_mask = {1, 1, 1, 0, 0, 1, 1};
  t.token_versions = {4, 4, 4, 0, 0, 5, 5};  // a weight update between the turns
  t.turns = 2;
  t.reward = 1.0;
  return t;
}

}  // namespace

TEST_SUITE("rl.trajectory") {
  TEST_CASE("an episode round-trips with its tokens, mask and versions exactly") {
    const Trajectory t = episode();
    REQUIRE(t.check_episode().is_ok());
    auto back = Trajectory::from_json(nlohmann::json::parse(t.to_json().dump()));
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->response_tokens == t.response_tokens);
    CHECK(back->logprobs == t.logprobs);
    CHECK(back->loss_mask == t.loss_mask);
    CHECK(back->token_versions == t.token_versions);
    CHECK(back->turns == 2);
    CHECK(back->model_tokens() == 5);
    CHECK(back->is_episode());

    // A single turn travels as before: no episode fields.
    Trajectory one = t;
    one.loss_mask.clear();
    one.token_versions.clear();
    one.turns = 1;
    CHECK_FALSE(one.to_json().contains("loss_mask"));
    auto plain = Trajectory::from_json(one.to_json());
    REQUIRE(plain.is_ok());
    CHECK_FALSE(plain->is_episode());
    CHECK(plain->model_tokens() == t.response_tokens.size());
  }

  TEST_CASE("an episode that breaks its rules is refused, saying which token") {
    auto refused = [](const Trajectory& t, const std::string& says) {
      auto r = Trajectory::from_json(t.to_json());
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().code() == core::Code::kProtocol);
      CHECK_MESSAGE(r.status().message().find(says) != std::string::npos, r.status().message());
    };
    Trajectory t = episode();
    t.logprobs[3] = -0.5f;  // an environment token that claims a sampling log-prob
    refused(t, "environment token 3");
    t = episode();
    t.token_versions[5] = 3;  // a later turn from an older version
    refused(t, "model token 5 has version 3 after version 4");
    t = episode();
    t.token_versions[6] = 6;
    refused(t, "version 6, which `versions` does not list");
    t = episode();
    t.loss_mask.pop_back();
    refused(t, "a loss mask of 6 and 7 token versions for 7 response tokens");
    t = episode();
    t.token_versions[0] = 5;
    t.token_versions[1] = 5;
    t.token_versions[2] = 5;
    refused(t, "the first model token has version 5, not the trajectory's 4");
    t = episode();
    t.loss_mask = {0, 0, 0, 0, 0, 0, 0};
    t.token_versions = {0, 0, 0, 0, 0, 0, 0};
    t.logprobs.assign(7, 0.0f);
    refused(t, "no model token");
    t = episode();
    nlohmann::json j = t.to_json();
    j["loss_mask"][0] = 2;
    auto two = Trajectory::from_json(j);
    REQUIRE_FALSE(two.is_ok());
    CHECK(two.status().message().find("'loss_mask' must hold 0 and 1") != std::string::npos);
    j = t.to_json();
    j["turns"] = 100000;
    CHECK_FALSE(Trajectory::from_json(j).is_ok());
  }
}
