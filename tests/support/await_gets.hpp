// Runs a loop until every get has answered (each slot set by its callback), at most `limit`;
// returns each get's status, a timeout error for one that never answered.
#pragma once

#include <optional>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"

namespace sluice::testing {

inline std::vector<core::Status> await_gets(core::EventLoop& loop,
                                            std::vector<std::optional<core::Status>>& out,
                                            core::Millis limit = core::Millis(20000)) {
  loop.run_until(
      [&] {
        for (auto& o : out)
          if (!o) return false;
        return true;
      },
      limit);
  std::vector<core::Status> st;
  for (auto& o : out)
    st.push_back(o ? *o : core::timeout_error("never answered"));
  return st;
}

}  // namespace sluice::testing
