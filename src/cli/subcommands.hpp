// The subcommands of the `sluice` executable, as one table: each entry registers its own options
// and runs a library's command once the command line has been parsed. The libraries hold the
// work (src/launch, src/bench, src/analysis); this folder holds only the command line.
//
// Thread safety: built, parsed and run on the main thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace sluice::cli {

// What every run function gets besides its own options.
struct Context {
  // The process environment as the user gave it, before sluice's UCX defaults were added.
  const std::vector<std::string>& environment;
};

struct Subcommand {
  std::string parent;  // "" for a top-level subcommand, else "bench" or "study"
  std::string name;
  std::string help;
  bool hidden = false;  // started by benches and tests, not typed by hand: left out of --help
  std::function<void(CLI::App&)> add_options;
  std::function<int(const Context&)> run;  // the exit status: 0 ok, 1 failed, 2 usage error
  // True when this run reads over UCX's tcp transport (the --ucx-get commands; everything else
  // reads tcp over chunk streams): core::ucx_env_defaults depends on it. Unset: false.
  std::function<bool()> ucx_tcp;
};

// A subcommand whose options are bound to one `Args` (made here, default-constructed): `add`
// is called as add(CLI::App&, Args&) before parsing, `run` as run(const Args&, const Context&).
// `path` is "NAME" or "PARENT NAME"; `ucx_tcp`, when given, says from the parsed Args whether
// the run gives UCX its tcp transport.
template <typename Args, typename Add, typename Run>
Subcommand subcommand(std::string path, std::string help, Add add, Run run, bool hidden = false,
                      bool (*ucx_tcp)(const Args&) = nullptr) {
  auto args = std::make_shared<Args>();
  Subcommand s;
  if (auto space = path.find(' '); space != std::string::npos) {
    s.parent = path.substr(0, space);
    s.name = path.substr(space + 1);
  } else {
    s.name = path;
  }
  s.help = std::move(help);
  s.hidden = hidden;
  s.add_options = [args, add](CLI::App& app) { add(app, *args); };
  s.run = [args, run](const Context& ctx) { return run(*args, ctx); };
  if (ucx_tcp) s.ucx_tcp = [args, ucx_tcp] { return ucx_tcp(*args); };
  return s;
}

// Adapters for the libraries' run functions: run(args), and run(args, environment).
template <typename Args>
auto plain(int (*run)(const Args&)) {
  return [run](const Args& a, const Context&) { return run(a); };
}
template <typename Args>
auto with_env(int (*run)(const Args&, const std::vector<std::string>&)) {
  return [run](const Args& a, const Context& ctx) { return run(a, ctx.environment); };
}

// The table, in --help order.
std::vector<Subcommand> subcommand_table();

// Its parts (cli/launch_commands.cpp, cli/bench_commands.cpp).
std::vector<Subcommand> role_subcommands();     // version, the five roles
std::vector<Subcommand> job_subcommands();      // run, replay
std::vector<Subcommand> bench_subcommands();    // chaos ... study, transfer-source, transfer-read
std::vector<Subcommand> tool_subcommands();     // publish, pull, keys, ping
std::vector<Subcommand> cluster_subcommands();  // slurm, slurm-collect, k8s

}  // namespace sluice::cli
