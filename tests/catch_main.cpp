// The one Catch2 main for every memcomm test executable (see tests/CMakeLists.txt).
//
// Note [Test names that look like flags]
// ctest runs each discovered case as `exe "<name>"`. A name that begins with '-' is parsed by
// Catch as an option instead: the case never runs and the executable can still exit 0, so ctest
// reports a pass for a test that did nothing. The main refuses such names before running anything.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  int bad = 0;
  for (const Catch::TestCase& t : Catch::getRegistryHub().getTestCaseRegistry().getAllTests()) {
    if (!t.name.empty() && t.name.front() == '-') {
      std::fprintf(stderr, "%s:%zu: test case \"%s\" begins with '-', which ctest passes as a flag "
                           "(Note [Test names that look like flags]); rename it.\n",
                   t.lineInfo.file, t.lineInfo.line, t.name.c_str());
      ++bad;
    }
  }
  if (bad) return 1;
  return session.run();
}
