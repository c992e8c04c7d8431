// The allocation timeline and "who holds memory" panes (issue 18) driven by scripted input on a
// shared PyTorch snapshot, on a snapshot without frames and on the hand-built fixture (no stacks),
// and memcomm-view --report-json's peak sites against memcomm-trace memory --at peak --json.
#include "gui_fixture.hpp"
#include "json_text.hpp"
#include "snapshot_fixtures.hpp"
#include "view_traces.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace gui_test;
using namespace memcomm::view;

namespace {

const std::string kSnapshot = "magma27__memory_snapshot.pickle";

std::unique_ptr<App> open_in_allocations(const std::string& path) {
  auto app = make_app(1300, 800, "timeline,allocations");
  app->start_load({path});
  for (int i = 0; i < 2000 && app->loading(); ++i) app->frame();
  frames(*app, 3);
  return app;
}

// The window point over the middle of a band, "x y".
std::string band_point(const AppState& st, const AllocationBand& b) {
  const double mid = (static_cast<double>(b.y0) + static_cast<double>(b.y1)) / 2;
  const float y = st.alloc_y1 - static_cast<float>(mid / st.alloc_ymax) * (st.alloc_y1 - st.alloc_y0);
  return std::to_string(st.alloc_x0 + (b.c0 + b.c1) / 2.0f) + " " + std::to_string(y);
}

// The widest-and-tallest band on screen (easy to hit).
const AllocationBand& biggest_band(const AppState& st) {
  REQUIRE_FALSE(st.alloc_layout.bands.empty());
  return *std::max_element(st.alloc_layout.bands.begin(), st.alloc_layout.bands.end(), [](const auto& a, const auto& b) {
    return (a.c1 - a.c0) * static_cast<double>(a.y1 - a.y0) < (b.c1 - b.c0) * static_cast<double>(b.y1 - b.y0);
  });
}

std::string command_output(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  std::string out;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  pclose(p);
  return out;
}

}  // namespace

TEST_CASE("allocation bands of a shared snapshot: hover shows the stack, click pins, search narrows", "[gui][viewer]") {
  const std::string path = memcomm::test::shared_snapshots_dir() + "/" + kSnapshot;
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  auto app = open_in_allocations(path);
  AppState& st = app->state();
  REQUIRE(st.tl.ranks.at(0).stacks != nullptr);
  const AllocationBand band = biggest_band(st);
  run_script_and_load(*app, "move " + band_point(st, band) + "\nframes 2\n");
  REQUIRE(st.has_hovered_alloc);
  const AllocationTip want = allocation_tip(st.tl.ranks[0], band.alloc, false);
  CHECK(st.hovered_alloc.size == want.size);
  CHECK(st.hovered_alloc.stack == want.stack);
  CHECK(st.hovered_alloc.stack != std::vector<std::string>{kNoStackText});
  CHECK(st.tooltip.find(want.stack.back()) != std::string::npos);  // the innermost frame is shown
  // A click pins it: marked in this pane and on the time axis of the others.
  run_script_and_load(*app, "click " + band_point(st, band) + "\nframes 2\n");
  CHECK(st.pinned_alloc == static_cast<int>(band.alloc));
  CHECK(st.pinned_t0 == st.tl.ranks[0].allocations.list[band.alloc].alloc_ns);
  // Search by the innermost frame's function: fewer bands match than are drawn, and it matches.
  const std::string line = want.stack.back();
  const std::string function = line.substr(line.rfind(':') + 1);
  run_script_and_load(*app, "click " + at(st.alloc_search_box) + "\nframes 1\ntype " + function + "\nframes 3\n");
  CHECK(st.alloc_search_applied == function);
  CHECK(st.alloc_search_hits > 0);
  CHECK(st.alloc_search_hits < st.alloc_layout.bands.size());
}

TEST_CASE("the peak button moves the holders pane to the peak of live bytes", "[gui][viewer]") {
  const std::string path = memcomm::test::shared_snapshots_dir() + "/" + kSnapshot;
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  auto app = open_in_allocations(path);
  AppState& st = app->state();
  const memcomm::prof::LivePeak peak = memcomm::prof::peak_live(st.tl.ranks[0].allocations);
  REQUIRE(st.alloc_time != peak.t);
  run_script_and_load(*app, "click " + at(st.peak_button) + "\nframes 2\n");
  CHECK(st.alloc_time == peak.t);
  CHECK_FALSE(st.alloc_follow_cursor);
  CHECK(st.holders.at_ns == peak.t);
  CHECK(st.holders.live_bytes == peak.bytes);
  REQUIRE_FALSE(st.holders_peak.sites.empty());
  CHECK(st.holders_peak.live_bytes == peak.bytes);
}

TEST_CASE("a snapshot without frames opens and its allocations say 'no stack'", "[gui][viewer]") {
  const std::string path = snapshot_fixture::write_no_frames_snapshot();
  auto app = open_in_allocations(path);
  AppState& st = app->state();
  INFO(nlohmann::json(st.messages).dump());
  REQUIRE(st.tl.ranks.size() == 1);
  const AllocationBand band = biggest_band(st);
  run_script_and_load(*app, "move " + band_point(st, band) + "\nframes 2\n");
  REQUIRE(st.has_hovered_alloc);
  CHECK(st.tooltip.find("no stack") != std::string::npos);
}

TEST_CASE("a trace without stacks (.mct-like) shows bands whose tooltips say 'no stack'", "[gui][viewer]") {
  auto app = make_app(1300, 800, "timeline,allocations");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  frames(*app, 3);
  REQUIRE(st.tl.ranks.at(0).stacks == nullptr);
  REQUIRE_FALSE(st.tl.ranks[0].allocations.list.empty());
  const AllocationBand band = biggest_band(st);
  run_script_and_load(*app, "move " + band_point(st, band) + "\nframes 2\n");
  REQUIRE(st.has_hovered_alloc);
  CHECK(st.tooltip.find("no stack") != std::string::npos);
  CHECK(st.hovered_alloc.size == st.tl.ranks[0].allocations.list[band.alloc].size);
}

TEST_CASE("memcomm-view --report-json gives the peak sites memcomm-trace memory gives", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string dir = memcomm::test::shared_snapshots_dir();
  if (!std::filesystem::exists(dir)) MEMCOMM_SKIP_TEST("shared snapshots not found: " + dir);
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pickle") continue;
    const std::string path = entry.path().string();
    INFO(path);
    const std::string report = out_dir() + "/allocations_report.json";
    REQUIRE(run_viewer("--panes allocations --frames 2 --size 1000x700 --screenshot " + out_dir() + "/allocations.png --report-json " +
                       report + " " + path) == 0);
    const auto j = memcomm::test::read_json(report);
    // memcomm-trace memory sums a file's devices; the view shows one device per rank: files with
    // one device only (what is left to do for several is in bench/results/viewer-cpu.md).
    if (j["ranks"].size() != 1) continue;
    const auto& view = j["memory_at"]["peak"];
    const auto tool = memcomm::test::parse_json(
        command_output(std::string(MEMCOMM_BINARY_DIR) + "/bin/memcomm-trace memory " + path + " --at peak --json"));
    CHECK(view["at_ns"] == tool["at_ns"]);
    CHECK(view["live_bytes"] == tool["live_bytes"]);
    REQUIRE(view["sites"].size() == tool["sites"].size());
    for (std::size_t k = 0; k < tool["sites"].size(); ++k) {
      CHECK(view["sites"][k]["bytes"] == tool["sites"][k]["bytes"]);
      CHECK(view["sites"][k]["stack"] == tool["sites"][k]["stack"]);
    }
    ++compared;
  }
  CHECK(compared > 0);
}

TEST_CASE("memcomm-view --report-json gives the peak's categories memcomm-trace memory gives, for a trace without stacks",
          "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  // memcomm-train's trace tags its blocks (Note [Sites of blocks without stacks]).
  const std::string path = std::string(MEMCOMM_SOURCE_DIR) + "/tests/allocator/data/trainer_mlp_accum2.rank1.mct";
  const std::string report = out_dir() + "/allocations_mct_report.json";
  REQUIRE(run_viewer("--panes allocations --frames 2 --size 1000x700 --screenshot " + out_dir() + "/allocations_mct.png --report-json " +
                     report + " " + path) == 0);
  const auto view = memcomm::test::read_json(report)["memory_at"]["peak"];
  const auto tool = memcomm::test::parse_json(
      command_output(std::string(MEMCOMM_BINARY_DIR) + "/bin/memcomm-trace memory " + path + " --at peak --json"));
  CHECK(view["live_bytes"] == tool["live_bytes"]);
  REQUIRE(tool["sites"].size() > 1);
  REQUIRE(view["sites"].size() == tool["sites"].size());
  for (std::size_t k = 0; k < tool["sites"].size(); ++k) {
    CHECK(view["sites"][k]["bytes"] == tool["sites"][k]["bytes"]);
    CHECK(view["sites"][k]["stack"] == tool["sites"][k]["stack"]);
  }
}

TEST_CASE("a snapshot opens with the allocation panes and the Summary without the empty step table", "[gui][viewer]") {
  auto app = make_app(1600, 900, "");  // the default panes
  app->start_load({snapshot_fixture::write_pending_at_start_snapshot()});
  for (int i = 0; i < 2000 && app->loading(); ++i) app->frame();
  const AppState& st = app->state();
  REQUIRE(st.tl.ranks.size() == 1);
  CHECK(st.steps.empty());
  CHECK(st.panes.allocations);
  CHECK(st.panes.summary);
  CHECK_FALSE(st.panes.steps);
  // A trace with steps opened after it brings the step table back (it stayed hidden).
  app->start_load({view_traces::write_steps(out_dir() + "/steps_after_snapshot.rank0.mct")});
  for (int i = 0; i < 2000 && app->loading(); ++i) app->frame();
  REQUIRE_FALSE(st.steps.empty());
  CHECK(st.panes.steps);
}

TEST_CASE("two snapshots: the holders pane compares end states as memcomm-trace compare does", "[gui][viewer]") {
  const std::string a = memcomm::test::shared_snapshots_dir() + "/" + kSnapshot;
  const std::string b = memcomm::test::shared_snapshots_dir() + "/eor_nn__snapshot.pickle";
  if (!std::filesystem::exists(a) || !std::filesystem::exists(b)) MEMCOMM_SKIP_TEST("shared snapshots not found");
  auto app = make_app(1300, 900, "");  // the default panes: snapshots add the allocation panes
  app->start_load({a, b});
  for (int i = 0; i < 2000 && app->loading(); ++i) app->frame();
  AppState& st = app->state();
  REQUIRE(st.panes.allocations);
  REQUIRE(st.tl.ranks.size() == 2);
  REQUIRE(st.tl.ranks[0].stacks != nullptr);
  REQUIRE(st.tl.ranks[1].stacks != nullptr);
  // Which rank came from which file: their end states' live bytes tell them apart.
  const auto end_live = [&](const std::string& file) {
    return memcomm::test::parse_json(command_output(memcomm::test::bin_dir() + "/memcomm-trace memory --json " + file))["live_bytes"]
        .get<std::uint64_t>();
  };
  const auto& r0 = st.tl.ranks[0].allocations;
  const bool a_first = memcomm::prof::live_bytes(r0, r0.end) == end_live(a);
  st.memory_rank = 1;
  st.compare_rank = 0;
  frames(*app, 3);
  REQUIRE_FALSE(st.comparison.empty());
  const std::string before = a_first ? a : b, after = a_first ? b : a;
  const auto want = memcomm::test::parse_json(
      command_output(memcomm::test::bin_dir() + "/memcomm-trace compare --json " + before + " " + after))["sites"];
  std::vector<const memcomm::snapshot::SiteChange*> changed;
  for (const auto& c : st.comparison)
    if (c.delta() != 0) changed.push_back(&c);
  REQUIRE(changed.size() == want.size());
  for (std::size_t k = 0; k < changed.size(); ++k) {
    CAPTURE(k);
    CHECK(changed[k]->stack == want[k]["stack"].get<std::vector<std::string>>());
    CHECK(changed[k]->delta() == want[k]["delta"].get<std::int64_t>());
  }
}
