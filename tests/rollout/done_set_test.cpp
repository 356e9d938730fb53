// The manager's record of done trajectories (rollout/done_set.hpp): what a user relies on is that
// a done trajectory is never taken for new work, whatever order the actor acknowledges in, and
// that the record costs what is done out of order, not the job's length.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "rollout/done_set.hpp"

using sluice::rollout::DoneSet;

namespace {

std::string id(std::uint64_t p, std::uint64_t k) {
  return fmt::format("p{}/{}", p, k);
}

}  // namespace

TEST_CASE("done set: acknowledged in order, the floor rises and nothing stays above it") {
  DoneSet done(4);
  for (std::uint64_t p = 0; p < 1000; ++p) {
    for (std::uint64_t k = 0; k < 4; ++k)
      CHECK(done.add(id(p, k)));
  }
  CHECK(done.floor() == 1000);
  CHECK(done.above() == 0);
  CHECK(done.contains(id(0, 0)));
  CHECK(done.contains(id(999, 3)));
  CHECK_FALSE(done.contains(id(1000, 0)));
  CHECK_FALSE(done.add(id(5, 1)));  // below the floor: already done
}

TEST_CASE("done set: in any order, every added id is done and no other") {
  DoneSet done(3);
  std::vector<std::string> ids;
  for (std::uint64_t p = 0; p < 200; ++p) {
    for (std::uint64_t k = 0; k < 3; ++k)
      ids.push_back(id(p, k));
  }
  std::mt19937 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);
  // Half of them, shuffled: exactly those are done.
  std::vector<std::string> half(ids.begin(), ids.begin() + 300);
  for (const auto& i : half)
    CHECK(done.add(i));
  for (const auto& i : half)
    CHECK(done.contains(i));
  for (auto it = ids.begin() + 300; it != ids.end(); ++it)
    CHECK_FALSE(done.contains(*it));
  CHECK_FALSE(done.add(half.front()));  // twice: changes nothing
  // The rest: all done, and the record is a floor alone.
  for (auto it = ids.begin() + 300; it != ids.end(); ++it)
    CHECK(done.add(*it));
  CHECK(done.floor() == 200);
  CHECK(done.above() == 0);
}

TEST_CASE("done set: a long tail holds the floor, the record is what finished after it") {
  DoneSet done(2);
  CHECK(done.add(id(0, 0)));  // p0/1 is the long tail
  for (std::uint64_t p = 1; p < 50; ++p) {
    CHECK(done.add(id(p, 0)));
    CHECK(done.add(id(p, 1)));
  }
  CHECK(done.floor() == 0);
  CHECK(done.above() == 99);
  CHECK(done.done_in(0) == 1);
  CHECK(done.done_in(7) == 2);
  CHECK(done.add(id(0, 1)));
  CHECK(done.floor() == 50);
  CHECK(done.above() == 0);
  CHECK(done.done_in(7) == 2);
}

TEST_CASE("done set: ids that are not trajectories of the job are never done") {
  DoneSet done(4);
  CHECK_FALSE(done.add("x"));
  CHECK_FALSE(done.add("p1/4"));  // member beyond the group
  CHECK_FALSE(done.add("p01/0"));
  CHECK_FALSE(done.contains("p0/9"));
  CHECK(done.above() == 0);
}

TEST_CASE("done set: restored from its floor and ids, it answers as before") {
  DoneSet a(2);
  for (auto i : {id(0, 0), id(0, 1), id(1, 1), id(3, 0), id(3, 1)})
    a.add(i);
  DoneSet b(2);
  b.restore(a.floor(), {id(1, 1), id(3, 0), id(3, 1)});
  std::string da, db;
  a.describe(da);
  b.describe(db);
  CHECK(da == db);
  CHECK(b.floor() == 1);
  CHECK(b.contains(id(3, 1)));
  CHECK_FALSE(b.contains(id(1, 0)));
}
