// The main of every doctest executable of tests/. CTest runs each test case
// as `<executable> --test-case=<name>`; a name that selects no test case
// (CMake's test discovery cuts a name at a ';', for one) would make doctest
// run nothing and exit 0, a test that cannot fail. Here a run in which no
// test case passes the filters fails instead, saying so.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

namespace {

// A listener that keeps how many test cases the run's filters selected.
struct SelectedCases : doctest::IReporter {
  static inline unsigned selected = 0;
  static inline bool ran = false;

  explicit SelectedCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    ran = true;
    selected = stats.numTestCasesPassingFilters;
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

REGISTER_LISTENER("selected_cases", 1, SelectedCases);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;  // --help, --list-test-cases, ...
  if (SelectedCases::ran && SelectedCases::selected == 0) {
    std::cerr << "tests: no test case passes the filters given: nothing was tested\n";
    return 1;
  }
  return result;
}
