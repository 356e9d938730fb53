#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

// How many test cases the run's filters matched. ctest runs each case by name
// (--test-case=NAME); a name doctest cannot match (one with a ';', which CMake splits) would run
// nothing and pass, so a filtered run that matched nothing fails instead.
int g_matched = -1;

struct MatchCounter : doctest::IReporter {
  explicit MatchCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    g_matched = static_cast<int>(stats.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_LISTENER("match_counter", 1, MatchCounter);

int main(int argc, char** argv) {
  // In-process engines read tcp over chunk streams, so the UCX tcp defaults that the sluice
  // executable sets for --ucx-get (core::ucx_env_defaults) have nothing to tune here.
  bool by_name = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0)
      by_name = true;
  }
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  if (rc == 0 && by_name && g_matched == 0 && !ctx.shouldExit()) {
    std::fprintf(stderr, "no test case matched the name given: nothing ran\n");
    return 1;
  }
  return rc;
}
