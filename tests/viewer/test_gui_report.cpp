// memcomm-view --report-json against memcomm-trace report --json on the same files (Note [One
// analysis engine] in memcomm/trace/analysis.hpp): the figures the step table and the summary
// show are the report's. The run is parity_run's, written here (no LibTorch needed);
// tests/trainer/test_trainer_report.cpp does the same on a run memcomm-train records.
#include "gui_fixture.hpp"
#include "parity_run.hpp"
#include "report_parity.hpp"

#include <cstdlib>

using namespace gui_test;

TEST_CASE("memcomm-view reports the step table and summary that memcomm-trace report computes", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const bool kernels = GENERATE(false, true);
  INFO((kernels ? "GPU" : "CPU") << " run");
  const auto files = parity_run::write(out_dir() + (kernels ? "/report_gpu" : "/report_cpu"), kernels);
  memcomm::test::check_view_matches_report(files[0] + " " + files[1], out_dir());
}
