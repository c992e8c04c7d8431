// A short 2-rank memcomm-train run, recorded, then opened in memcomm-view: the figures its step
// table and summary show (--report-json's "analysis") are memcomm-trace report --json's (Note [One
// analysis engine] in memcomm/trace/analysis.hpp). Needs a display for the viewer (label gui);
// tests/viewer/test_gui_report.cpp does the same on a run written by the test, without LibTorch.
#include "trainer_runner.hpp"
#include "json_text.hpp"
#include "report_parity.hpp"

using namespace memcomm::test;

// Rank 1's clock offset is recorded after its first allocator events; the viewer finds it before
// ingesting (Note [Clock offsets found first] in viewer/model/ingest_file.cpp), so its memory curves
// come from the block events, as the report's do.
TEST_CASE("memcomm-view shows memcomm-trace report's step times, comm, overlap, busbw and peaks for a trained run") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no X display (run under xvfb-run -a)");
  if (!std::filesystem::exists(bin_dir() + "/memcomm-view")) MEMCOMM_SKIP_TEST("memcomm-view is not built (MEMCOMM_WITH_VIEWER=OFF)");
  const auto d = scratch_dir("report_parity");
  const auto r = run_command(quick_train("--nproc 2 --steps 6 --trace " + d + "/t.mct"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  check_view_matches_report(d + "/t.rank0.mct " + d + "/t.rank1.mct", d);
  // The run recorded what the comparison is meant to cover: steps numbered from 1 and collectives.
  std::string out;
  REQUIRE(run_capture(bin_dir() + "/memcomm-trace report --json " + d + "/t.rank0.mct " + d + "/t.rank1.mct", out, false) == 0);
  const auto report = memcomm::test::parse_json(out);
  REQUIRE(report["steps"].size() >= 12);
  CHECK(report["steps"][0]["step"] == 1);
  CHECK(report["collectives"].size() > 0);
  CHECK(report["summary"]["mean_busbw_gbps"].get<double>() > 0);
}
