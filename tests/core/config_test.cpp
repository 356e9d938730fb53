#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "core/config.hpp"

using namespace sluice::core;
using config::Json;

namespace {

struct ChainConfig {
  int fanout = 1;
  std::vector<std::string> order;
  template <typename V>
  void describe(V& v) {
    v("fanout", fanout, "children per node (>= 1)");
    v("order", order, "relay names in chain order");
  }
  Status validate() const {
    if (fanout < 1)
      return invalid_argument("fanout must be at least 1, got " + std::to_string(fanout));
    return {};
  }
};

struct RelayConfig {
  std::string listen = "tcp://127.0.0.1:*";
  std::uint32_t keep_versions = 2;
  double heartbeat_s = 1.0;
  bool pin_memory = false;
  std::optional<std::string> datacenter;
  ChainConfig chain;
  std::map<std::string, int> weights;
  template <typename V>
  void describe(V& v) {
    v("listen", listen);
    v("keep_versions", keep_versions);
    v("heartbeat_s", heartbeat_s);
    v("pin_memory", pin_memory);
    v("datacenter", datacenter);
    v("chain", chain);
    v("weights", weights);
  }
};

struct Top {
  RelayConfig relay;
  template <typename V>
  void describe(V& v) {
    v("relay", relay);
  }
};

Status parse_text(const char* text, Top& out) {
  auto j = config::parse_json_text(text, "test");
  REQUIRE(j.is_ok());
  return config::parse(*j, out);
}

}  // namespace

TEST_SUITE("core.config") {
  TEST_CASE("defaults hold when the document is empty") {
    Top t;
    REQUIRE(parse_text("{}", t).is_ok());
    CHECK(t.relay.keep_versions == 2);
    CHECK(t.relay.listen == "tcp://127.0.0.1:*");
    CHECK_FALSE(t.relay.datacenter.has_value());
  }

  TEST_CASE("values are read at every depth") {
    Top t;
    REQUIRE(parse_text(R"({"relay": {"keep_versions": 3, "heartbeat_s": 2, "pin_memory": true,
        "datacenter": "dc2", "chain": {"fanout": 2, "order": ["a", "b"]},
        "weights": {"x": 1}}})",
                       t)
                .is_ok());
    CHECK(t.relay.keep_versions == 3);
    CHECK(t.relay.heartbeat_s == doctest::Approx(2.0));
    CHECK(t.relay.pin_memory);
    CHECK(t.relay.datacenter.value() == "dc2");
    CHECK(t.relay.chain.fanout == 2);
    CHECK(t.relay.chain.order == std::vector<std::string>{"a", "b"});
    CHECK(t.relay.weights.at("x") == 1);
  }

  TEST_CASE("an unknown key is an error naming its JSON path") {
    Top t;
    Status s = parse_text(R"({"relay": {"chain": {"fanuot": 2}}})", t);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("unknown key 'relay.chain.fanuot'") != std::string::npos);
    CHECK(s.message().find("fanout") != std::string::npos);  // lists the known keys
    CHECK(t.relay.chain.fanout == 1);
  }

  TEST_CASE("a wrong type is an error naming its JSON path and both types") {
    Top t;
    Status s = parse_text(R"({"relay": {"keep_versions": "three"}})", t);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.message() == "config: 'relay.keep_versions' must be an integer, got a string");

    s = parse_text(R"({"relay": {"chain": {"order": ["a", 5]}}})", t);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.message() == "config: 'relay.chain.order[1]' must be a string, got an integer");

    s = parse_text(R"({"relay": {"pin_memory": 1}})", t);
    CHECK(s.message() == "config: 'relay.pin_memory' must be a boolean, got an integer");

    s = parse_text(R"({"relay": {"keep_versions": -1}})", t);
    CHECK(s.message() ==
          "config: 'relay.keep_versions' must be a non-negative integer, got an integer");

    s = parse_text(R"({"relay": {"keep_versions": 2.5}})", t);
    CHECK(s.message().find("'relay.keep_versions' must be an integer") != std::string::npos);

    s = parse_text(R"({"relay": 7})", t);
    CHECK(s.message() == "config: 'relay' must be an object, got an integer");
  }

  TEST_CASE("validate() runs after parsing and its error names the path") {
    Top t;
    Status s = parse_text(R"({"relay": {"chain": {"fanout": 0}}})", t);
    REQUIRE_FALSE(s.is_ok());
    CHECK(s.message().find("'relay.chain'") != std::string::npos);
    CHECK(s.message().find("fanout must be at least 1, got 0") != std::string::npos);
  }

  TEST_CASE("--set overrides: nested paths, JSON values, bare strings, and still strict") {
    Json doc = Json::object();
    REQUIRE(config::apply_override(doc, "relay.chain.fanout=4").is_ok());
    REQUIRE(config::apply_override(doc, "relay.listen=tcp://127.0.0.1:7000").is_ok());
    REQUIRE(config::apply_override(doc, "relay.chain.order=[\"x\",\"y\"]").is_ok());
    Top t;
    REQUIRE(config::parse(doc, t).is_ok());
    CHECK(t.relay.chain.fanout == 4);
    CHECK(t.relay.listen == "tcp://127.0.0.1:7000");
    CHECK(t.relay.chain.order.size() == 2);

    REQUIRE(config::apply_override(doc, "relay.chian.fanout=2").is_ok());
    Status s = config::parse(doc, t);
    CHECK(s.message().find("unknown key 'relay.chian'") != std::string::npos);

    CHECK_FALSE(config::apply_override(doc, "no_equals_sign").is_ok());
    CHECK_FALSE(config::apply_override(doc, "a..b=1").is_ok());
    CHECK_FALSE(
        config::apply_override(doc, "relay.listen.deeper=1").is_ok());  // a string, not an object
  }

  TEST_CASE("environment overrides map SLUICE_CFG_a__b to a.b") {
    auto o = config::overrides_from_env(
        {"PATH=/usr/bin", "SLUICE_CFG_relay__chain__fanout=3", "SLUICE_OTHER=1"});
    REQUIRE(o.size() == 1);
    CHECK(o[0] == "relay.chain.fanout=3");
  }

  TEST_CASE("load: file then overrides -- a bad file is named in the error") {
    std::string path = "config_test_tmp.json";
    {
      std::ofstream f(path);
      f << R"({"relay": {"keep_versions": 5, "chain": {"fanout": 2}}})";
    }
    auto t = config::load<Top>(path, {"relay.chain.fanout=3"});
    REQUIRE(t.is_ok());
    CHECK(t->relay.keep_versions == 5);
    CHECK(t->relay.chain.fanout == 3);
    {
      std::ofstream f(path);
      f << R"({"relay": {"keep_versions": )";
    }
    auto bad = config::load<Top>(path, {});
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().message().find(path) != std::string::npos);
    std::remove(path.c_str());
    auto missing = config::load<Top>("/nonexistent/sluice.json", {});
    CHECK(missing.status().code() == Code::kNotFound);
  }

  TEST_CASE("the effective configuration prints every field and parses back the same") {
    Top t;
    t.relay.chain.fanout = 3;
    t.relay.datacenter = "dc1";
    Json j = config::to_json(t);
    CHECK(j["relay"]["chain"]["fanout"] == 3);
    CHECK(j["relay"]["keep_versions"] == 2);
    CHECK(j["relay"]["datacenter"] == "dc1");
    Top back;
    REQUIRE(config::parse(j, back).is_ok());
    CHECK(config::to_json(back) == j);
  }
}

namespace {
struct WithOptions {
  std::string name = "x";
  Json options = Json::object();
  template <typename V>
  void describe(V& v) {
    v("name", name);
    v("options", options);
  }
};
}  // namespace

TEST_CASE("a Json field takes any value as it is and prints it back") {
  auto doc = config::parse_json_text(
      R"({"name": "a", "options": {"lr": 0.001, "layers": [1, 2], "deep": {"unknown": null}}})",
      "test");
  REQUIRE(doc.is_ok());
  WithOptions w;
  REQUIRE(config::parse(*doc, w).is_ok());
  CHECK(w.options["lr"].get<double>() == doctest::Approx(0.001));
  CHECK(w.options["layers"] == Json::array({1, 2}));
  CHECK(w.options["deep"].contains("unknown"));  // nested keys are not checked: free-form
  CHECK(config::to_json(w)["options"] == w.options);

  auto scalar = config::parse_json_text(R"({"options": 3})", "test");
  REQUIRE(scalar.is_ok());
  WithOptions s;
  REQUIRE(config::parse(*scalar, s).is_ok());
  CHECK(s.options == Json(3));

  WithOptions d;  // absent: the default
  REQUIRE(config::parse(Json::object(), d).is_ok());
  CHECK(d.options == Json::object());
}
