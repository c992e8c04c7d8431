// Scripted interaction through ImGui's io (--script's commands): zoom on a step, hover a
// collective and read its tooltip, wheel zoom around the mouse, drag pan, W/S/A/D, range
// selection, step-table click, collapsing a rank.
#include "gui_fixture.hpp"
#include "json_text.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace gui_test;
using namespace memcomm::view;

namespace {

void run_script(App& app, const std::string& text) {
  std::vector<ScriptCommand> cmds;
  std::string error;
  REQUIRE(parse_script(text, "inline", cmds, error));
  app.set_script(std::move(cmds));
  for (int i = 0; i < 500 && !app.script_done(); ++i) app.frame();
  REQUIRE(app.script_done());
  app.frame();
}

std::unique_ptr<App> fixture_app(const std::string& panes = "timeline,memory") {
  auto app = make_app(1200, 600, panes);
  app->state().set_timeline(make_fixture(), false);
  frames(*app, 3);
  return app;
}

std::string at(float x, float y) {
  std::ostringstream s;
  s << static_cast<int>(x) << " " << static_cast<int>(y);
  return s.str();
}

}  // namespace

TEST_CASE("hovering a collective shows op and bytes and busbw and the straggler", "[gui][viewer]") {
  auto app = fixture_app();
  AppState& st = app->state();
  const float y = row_y(st, 1, LaneKind::Collective);
  REQUIRE(y > 0);
  run_script(*app, "move " + at(x_of(st, us(700)), y) + "\nframes 2\n");
  INFO(st.tooltip);
  CHECK(st.tooltip.find("all_reduce") != std::string::npos);
  CHECK(st.tooltip.find("64.0 MiB") != std::string::npos);
  CHECK(st.tooltip.find("busbw") != std::string::npos);
  CHECK(st.tooltip.find("STRAGGLER") != std::string::npos);
  CHECK(st.tooltip.find("rank 1") != std::string::npos);
  // The report carries the same text for tools that drive the viewer from outside.
  const auto j = memcomm::test::parse_json(app->report_json());
  CHECK(j["tooltip"].get<std::string>() == st.tooltip);
}

TEST_CASE("double-clicking a step zooms to it and so does the step table", "[gui][viewer]") {
  auto app = fixture_app("timeline,steps");
  AppState& st = app->state();
  const float y = row_y(st, 0, LaneKind::Phase, 0);
  REQUIRE(y > 0);
  // Step 1 spans [1 ms, 2 ms).
  const std::string p = at(x_of(st, us(1500)), y);
  run_script(*app, "move " + p + "\nframes 1\ndown\nup\ndown\nup\nframes 2\n");
  CHECK(st.view_t0 == us(1000));
  CHECK(st.view_t1 == us(2000));
  // Reset, then click the first row of the step table (rank 0, step 0).
  st.zoom_to(st.tl.begin, st.tl.end);
  frames(*app, 2);
  REQUIRE(st.step_row0_y > 0);
  run_script(*app, "click " + at(st.time_x0 + 5, st.step_row0_y) + "\nframes 2\n");
  CHECK(st.view_t0 == -us(50));  // the step with 5% margins
  CHECK(st.view_t1 == us(1050));
}

TEST_CASE("the wheel zooms around the mouse and dragging pans", "[gui][viewer]") {
  auto app = fixture_app();
  AppState& st = app->state();
  const float y = row_y(st, 0, LaneKind::Kernel);
  const float x = x_of(st, us(500));
  const TimeNs w0 = st.view_t1 - st.view_t0;
  run_script(*app, "wheel 3 " + at(x, y) + "\nframes 1\n");
  const TimeNs w1 = st.view_t1 - st.view_t0;
  CHECK(static_cast<double>(w1) == Approx(static_cast<double>(w0) * 0.512).epsilon(0.01));  // 0.8^3
  // The time under the mouse stays under the mouse.
  CHECK(std::abs(x_of(st, us(500)) - static_cast<float>(static_cast<int>(x))) <= 1.5f);
  // Drag 100 px to the right: the view moves 100 px worth of time to the left.
  const TimeNs t0 = st.view_t0;
  const double ns_per_px = static_cast<double>(w1) / (st.time_x1 - st.time_x0);
  run_script(*app, "drag " + at(x, y) + " " + at(x + 100, y) + "\n");
  CHECK(static_cast<double>(t0 - st.view_t0) == Approx(100 * ns_per_px).epsilon(0.05));
}

TEST_CASE("W/S zoom and A/D pan", "[gui][viewer]") {
  auto app = fixture_app();
  AppState& st = app->state();
  const TimeNs w0 = st.view_t1 - st.view_t0;
  run_script(*app, "key W 5\n");
  const TimeNs w1 = st.view_t1 - st.view_t0;
  CHECK(w1 < w0);
  const TimeNs t0 = st.view_t0;
  run_script(*app, "key A 5\n");
  CHECK(st.view_t0 < t0);
  CHECK(st.view_t1 - st.view_t0 == w1);
  run_script(*app, "key S 5\n");
  CHECK(st.view_t1 - st.view_t0 > w1);
  const TimeNs t1 = st.view_t0;
  run_script(*app, "key D 3\n");
  CHECK(st.view_t0 > t1);
}

TEST_CASE("right-drag selects a range and gives its stats", "[gui][viewer]") {
  auto app = fixture_app();
  AppState& st = app->state();
  const float y = row_y(st, 0, LaneKind::Kernel);
  run_script(*app, "drag " + at(x_of(st, us(150)), y) + " " + at(x_of(st, us(650)), y) + " right\n");
  REQUIRE(st.has_selection);
  CHECK(std::abs(static_cast<double>(st.sel_t0 - us(150))) < 3000);
  CHECK(std::abs(static_cast<double>(st.sel_t1 - us(650))) < 3000);
  CHECK(st.selection.collectives == 2);           // both ranks' all_reduce start before 650 us
  CHECK(st.selection.busy[static_cast<int>(LaneKind::Kernel)] > us(2 * 300));
  CHECK(st.selection.mem_valid);
}

TEST_CASE("clicking a rank header collapses its lanes", "[gui][viewer]") {
  auto app = fixture_app();
  AppState& st = app->state();
  float header = -1;
  for (const auto& l : st.layout)
    if (l.slot == 0 && l.lane < 0) header = l.y + l.h / 2;
  REQUIRE(header > 0);
  run_script(*app, "click 20 " + std::to_string(static_cast<int>(header)) + "\nframes 1\n");
  CHECK(st.collapsed[0]);
  CHECK(row_y(st, 0, LaneKind::Kernel) < 0);
  CHECK(row_y(st, 1, LaneKind::Kernel) > 0);
}

TEST_CASE("memcomm-view --script drives the UI and --report-json records the tooltip", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  // Synthetic run: 2 ranks, 100 ms steps; zoom on the first step by wheel, then hover.
  const std::string script = out_dir() + "/hover.script";
  std::ofstream(script) << "frames 2\nwheel 6 700 120\nframes 2\nmove 700 120\nframes 2\nkey D 2\nframes 1\n";
  const std::string report = out_dir() + "/script_report.json";
  std::string out;
  REQUIRE(run_viewer("--synthetic 200000 --size 1200x700 --script " + script + " --report-json " + report, &out) == 0);
  const auto j = memcomm::test::read_json(report);
  INFO(j.dump(2));
  CHECK(j["frames"].get<int>() >= 10);
  const auto view = j["view"];
  CHECK(view["t1"].get<std::int64_t>() - view["t0"].get<std::int64_t>() < view["end"].get<std::int64_t>() - view["begin"].get<std::int64_t>());
  CHECK_FALSE(j["tooltips"].empty());
}
