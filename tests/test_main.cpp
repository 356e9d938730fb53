#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

int main(int argc, char** argv) {
  // In-process engines read tcp over chunk streams, so the UCX tcp defaults that the sluice
  // executable sets for --ucx-get (core::ucx_env_defaults) have nothing to tune here.
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
