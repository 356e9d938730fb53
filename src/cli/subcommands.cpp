#include "cli/subcommands.hpp"

namespace sluice::cli {

std::vector<Subcommand> subcommand_table() {
  std::vector<Subcommand> table;
  for (auto part : {role_subcommands, job_subcommands, bench_subcommands, tool_subcommands,
                    cluster_subcommands}) {
    for (auto& s : part())
      table.push_back(std::move(s));
  }
  return table;
}

}  // namespace sluice::cli
