// memcomm-view --range T0:T1 loads only that time range of a trace (issue 6: "for very large
// files, a time range can be chosen before the full load"), and a bad range is a usage error.
#include "json_text.hpp"
#include "view_traces.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

using namespace gui_test;

namespace {
std::uint64_t spans_in_report(const std::string& report) {
  const auto j = memcomm::test::read_json(report);
  std::uint64_t n = 0;
  for (const auto& r : j["ranks"]) n += r["spans"].get<std::uint64_t>();
  return n;
}
}  // namespace

TEST_CASE("memcomm-view --range loads only the chosen time range", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string trace = view_traces::write_steps(out_dir() + "/range_steps.mct");
  const std::string all = out_dir() + "/range_all.json", part = out_dir() + "/range_part.json";
  std::string out;
  REQUIRE(run_viewer(trace + " --screenshot " + out_dir() + "/range_all.png --report-json " + all, &out) == 0);
  INFO(out);
  CHECK(spans_in_report(all) == 100 * 11);
  // [0.2 s, 0.2995 s]: steps 20..29 with their kernels; step 19 ends at 0.199 s, step 30 starts at 0.3 s.
  REQUIRE(run_viewer(trace + " --range 0.2:0.2995 --screenshot " + out_dir() + "/range_part.png --report-json " + part, &out) == 0);
  CHECK(spans_in_report(part) == 10 * 11);
  CHECK(run_viewer(trace + " --range 0.3:0.2 --screenshot " + out_dir() + "/range_bad.png", &out) == 2);
  CHECK(out.find("--range") != std::string::npos);
  // A range past the trace's end showed an empty view and exited 0.
  CHECK(run_viewer(trace + " --range 1000:2000 --screenshot " + out_dir() + "/range_past.png", &out) == 2);
  CHECK(out.find("--range 1000:2000 keeps no event: this file's events span 0..") != std::string::npos);
}
