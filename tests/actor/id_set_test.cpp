// The actor's bounded id set: exact (it answers as a set of every id would), and small for the
// ids the manager issues.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "actor/id_set.hpp"

using namespace sluice;
using namespace sluice::actor;

TEST_SUITE("actor.id_set") {
  TEST_CASE("it answers exactly as a set of every id, in any order, for ids of any form") {
    IdSet s(4);
    std::set<std::string> plain;
    std::mt19937_64 rng(7);
    std::vector<std::string> ids;
    for (int p = 0; p < 200; ++p)
      for (int k = 0; k < 4; ++k)
        ids.push_back("p" + std::to_string(p) + "/" + std::to_string(k));
    // Ids of other forms, some close to the manager's: kept one by one, never confused.
    for (const char* odd : {"p01/0", "p1/00", "p1/4", "p1/", "p/1", "q1/0", "a", "p-1/0",
                            "p99999999999999999999999/0", "p1/0/0"})
      ids.push_back(odd);
    std::shuffle(ids.begin(), ids.end(), rng);
    // Insert the first three quarters in a random order, checking every id against a plain set.
    const std::size_t half = ids.size() * 3 / 4;
    for (std::size_t i = 0; i < half; ++i) {
      CHECK(s.insert(ids[i]) == plain.insert(ids[i]).second);
      CHECK_FALSE(s.insert(ids[i]));
    }
    for (const auto& id : ids)
      CHECK(s.contains(id) == (plain.count(id) > 0));
    CHECK(s.size() == plain.size());
  }

  TEST_CASE("the floor follows complete prompts, so what is kept one by one stays small") {
    IdSet s(2);
    for (int p = 0; p < 100000; ++p) {
      // The second sample of each prompt arrives a few prompts late, as in a real job.
      s.insert("p" + std::to_string(p) + "/0");
      if (p >= 3) s.insert("p" + std::to_string(p - 3) + "/1");
    }
    CHECK(s.floor() == 99997);
    CHECK(s.entries() == 3);
    CHECK(s.size() == 199997);
    CHECK(s.contains("p5/1"));
    CHECK_FALSE(s.contains("p99998/1"));
    CHECK_FALSE(s.insert("p5/1"));
  }

  TEST_CASE("the saved form restores the same set, and a damaged one is refused") {
    IdSet s(3);
    for (const char* id : {"p0/0", "p0/1", "p0/2", "p1/0", "p2/2", "x"})
      s.insert(id);
    auto r = IdSet::restore(s.group_size(), s.floor(), s.listed());
    REQUIRE(r.is_ok());
    CHECK(r->floor() == 1);
    CHECK(r->size() == s.size());
    for (const char* id : {"p0/0", "p0/1", "p0/2", "p1/0", "p1/1", "p2/2", "x", "y"})
      CHECK(r->contains(id) == s.contains(id));
    CHECK(IdSet::restore(3, 2, {"p1/0"}).status().code() == core::Code::kInvalidArgument);
  }
}
