// The `sluice` executable: builds the subcommand table (cli/subcommands.hpp), parses the command
// line and runs the one subcommand given. Everything else lives in the libraries.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/subcommands.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "wire/transfer.hpp"

extern char** environ;

namespace {

using sluice::cli::Subcommand;

std::vector<std::string> read_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  return env;
}

// The environment as the user gave it, before sluice's UCX defaults were added.
const std::vector<std::string>& environment() {
  static const std::vector<std::string> env = read_environment();
  return env;
}

// The subcommands that group others (`sluice bench e2e`), with their help.
const std::map<std::string, std::string> kParents = {
    {"bench", "measure and print side-by-side tables"},
    {"study", "learning studies, run in one process"},
};

// Adds every subcommand of the table to `app`, in order, each parent when first needed; returns
// the CLI::App of each entry.
std::vector<CLI::App*> add_subcommands(CLI::App& app, const std::vector<Subcommand>& table) {
  std::map<std::string, CLI::App*> parents;
  std::vector<CLI::App*> apps;
  for (const auto& s : table) {
    CLI::App* under = &app;
    if (!s.parent.empty()) {
      auto& p = parents[s.parent];
      if (!p) {
        p = app.add_subcommand(s.parent, kParents.at(s.parent));
        p->require_subcommand(1);
      }
      under = p;
    }
    CLI::App* cmd = under->add_subcommand(s.name, s.help);
    if (s.hidden) cmd->group("");
    s.add_options(*cmd);
    apps.push_back(cmd);
  }
  return apps;
}

// A clearer message than CLI11's "arguments were not expected" for a misspelt subcommand.
bool known_subcommand(CLI::App& app, const std::string& first) {
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->get_name() == first) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // A sluice process started by another (a bench, a test, the job launcher) ends with it.
  sluice::core::die_with_parent(environment());
  CLI::App app{"sluice: asynchronous RL post-training runtime (weights out, trajectories in)",
               "sluice"};
  app.require_subcommand(1);
  app.fallthrough();
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  const std::vector<Subcommand> table = sluice::cli::subcommand_table();
  const std::vector<CLI::App*> apps = add_subcommands(app, table);

  if (argc > 1 && argv[1][0] != '-' && !known_subcommand(app, argv[1])) {
    std::fprintf(stderr, "sluice: unknown subcommand '%s' (see 'sluice --help')\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const Subcommand* given = nullptr;
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (apps[i]->parsed()) given = &table[i];
  }
  if (!given) return 2;
  // UCX reads its settings from the environment: sluice's measured defaults go there, before
  // any UCX context exists, for what the user has not set (and never over what they set). Only
  // the --ucx-get commands give UCX tcp to use; everything else reads tcp over chunk streams.
  const bool ucx_tcp = given->ucx_tcp && given->ucx_tcp();
  for (const auto& [var, value] : sluice::core::ucx_env_defaults(environment(), ucx_tcp)) {
    ::setenv(var.c_str(), value.c_str(), 0);
  }

  auto level = sluice::core::log::parse_level(log_level);
  if (!level.is_ok()) {
    std::fprintf(stderr, "sluice: %s\n", level.status().to_string().c_str());
    return 2;
  }
  sluice::core::log::set_level(*level);
  return given->run(sluice::cli::Context{environment()});
}
