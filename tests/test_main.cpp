#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/transfer.hpp"

extern char** environ;

int main(int argc, char** argv) {
  // The same UCX defaults the sluice executable sets at its edge, so in-process engines in the
  // tests run as they would in sluice.
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  for (const auto& [var, value] : sluice::core::ucx_env_defaults(env)) {
    ::setenv(var.c_str(), value.c_str(), 0);
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
