// The one Catch2 main for every memcomm test executable (see tests/CMakeLists.txt).
//
// Note [Test names that look like flags]
// ctest runs each discovered case as `exe "<name>"`. A name that begins with '-' is parsed by Catch
// as an option instead: the case never runs and the executable can still exit 0, so ctest reports a
// pass for a test that did nothing. A name with ';' is split by discovery (a CMake list) into two
// names that match nothing. Discovery ignores a listing's exit code, so refusing there would only
// drop the executable's tests from ctest without a word; the main refuses when it is asked to *run*
// instead, so every case of the executable fails loudly with the culprit's name.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& cfg = session.configData();
  const bool listing = cfg.listTests || cfg.listTestNamesOnly || cfg.listTags || cfg.listReporters;
  int bad = 0;
  for (const Catch::TestCase& t : Catch::getRegistryHub().getTestCaseRegistry().getAllTests()) {
    if (listing) break;
    if ((!t.name.empty() && t.name.front() == '-') || t.name.find(';') != std::string::npos) {
      std::fprintf(stderr, "%s:%zu: test case \"%s\" begins with '-' or holds ';', which ctest cannot run as named "
                           "(Note [Test names that look like flags]); rename it.\n",
                   t.lineInfo.file, t.lineInfo.line, t.name.c_str());
      ++bad;
    }
  }
  if (bad) return 1;
  return session.run();
}
