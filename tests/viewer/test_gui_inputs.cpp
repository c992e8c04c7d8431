// Driving the real UI through input scripts: File > Open, a dropped file, the search box, the
// large-file prompt; and what the panes draw: linked collectives, the status line.
#include "view_traces.hpp"

#include <memcomm/view/app/input_script.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>

using namespace gui_test;
using namespace memcomm::view;
namespace pal = memcomm::view::palette;

namespace {

// Runs `script` (input_script.hpp) to its end, then frames until loading is done.
void run_script(App& app, const std::string& script) {
  std::vector<ScriptCommand> cmds;
  std::string error;
  REQUIRE(parse_script(script, "test", cmds, error));
  app.set_script(std::move(cmds));
  for (int i = 0; i < 500 && !app.script_done(); ++i) app.frame();
  REQUIRE(app.script_done());
  for (int i = 0; i < 3000 && app.loading(); ++i) {
    app.frame();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  frames(app, 2);
}

std::string at(const AppState::Point& p) { return std::to_string(p.x) + " " + std::to_string(p.y); }

bool has_source(const AppState& st, const std::string& path) {
  for (const auto& s : st.tl.sources)
    if (s.compare(0, path.size(), path) == 0) return true;
  return false;
}

std::uint64_t span_total(const AppState& st) {
  std::uint64_t n = 0;
  for (const auto& rd : st.tl.ranks)
    for (const auto& l : rd.lanes) n += l.span_count();
  return n;
}

}  // namespace

#if defined(MEMCOMM_VIEW_HAVE_PROFILER)
TEST_CASE("File > Open: the menu then the path typed in the dialog and Enter load it", "[gui][viewer]") {
  const std::string trace = view_traces::write_steps(out_dir() + "/open_dialog.mct");
  auto app = make_app(1000, 600, "");
  frames(*app, 2);
  AppState& st = app->state();
  REQUIRE(st.file_menu.y >= 0);
  run_script(*app, "click " + at(st.file_menu) + "\nframes 2\n");
  REQUIRE(st.open_item.y >= 0);  // the menu is open
  run_script(*app, "click " + at(st.open_item) + "\nframes 2\ntype " + trace + "\nkey enter\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(has_source(st, trace));
  CHECK(span_total(st) == 1100);
}

TEST_CASE("a file dropped on the window is opened and merged with what is shown", "[gui][viewer]") {
  const std::string trace = view_traces::write_steps(out_dir() + "/dropped.mct");
  auto app = make_app(1000, 600, "");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  frames(*app, 2);
  run_script(*app, "drop " + trace + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(has_source(st, trace));
  CHECK(st.tl.ranks.size() >= 2);  // the fixture's ranks stay
  CHECK(span_total(st) > 1100);
}

TEST_CASE("a large file asks for a time range first and the typed range is what loads", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string trace = view_traces::write_steps(out_dir() + "/prompt_steps.mct");
  AppOptions o;
  o.width = 1000;
  o.height = 600;
  o.hidden = false;            // the prompt is for people: headless runs load everything
  o.range_prompt_bytes = 100;  // "large" for this test
  App app(o);
  std::string why;
  if (!app.open_window(why)) MEMCOMM_SKIP_TEST(why);
  app.start_load({trace});
  frames(app, 3);
  AppState& st = app.state();
  CHECK_FALSE(app.loading());  // waiting for the answer
  CHECK(st.tl.empty());
  REQUIRE(st.range_load.y >= 0);  // the prompt is up
  // [0.2 s, 0.2995 s]: steps 20..29 with their kernels (as test_gui_range.cpp's --range).
  run_script(app, "click " + at(st.range_from) + "\nframes 1\ntype 0.2\nclick " + at(st.range_to) +
                      "\nframes 1\ntype 0.2995\nframes 1\nclick " + at(st.range_load) + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(span_total(st) == 10 * 11);
  CHECK(st.range_load.y < 0);  // the prompt is gone
}
#endif

TEST_CASE("the search box: typed text outlines the matching spans and counts them", "[gui][viewer]") {
  auto app = make_app(1000, 500, "timeline");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  frames(*app, 2);
  REQUIRE(st.search_box.y >= 0);
  const Image before = grab(*app, "search_before.png");
  run_script(*app, "click " + at(st.search_box) + "\nframes 1\ntype gemm\nframes 2\nmove 5 " +
                       std::to_string(static_cast<int>(st.search_box.y) + 200) + "\nframes 2\n");
  CHECK(st.search_applied == "gemm");
  CHECK(st.search_hits == 2);  // one gemm kernel per rank
  const Image img = grab(*app, "search_gemm.png");
  const pal::Rgb outline{255, 255, 0};
  const int y = static_cast<int>(row_y(st, 0, LaneKind::Kernel));
  REQUIRE(y > 0);
  // The outline around rank 0's gemm [100 us, 300 us), and none before the search.
  CHECK(img.count(static_cast<int>(x_of(st, us(100))) - 3, y - 12, static_cast<int>(x_of(st, us(300))) + 3, y + 12, outline) > 20);
  CHECK(before.count(0, 0, before.w, before.h, outline) == 0);
}

TEST_CASE("matched collectives are linked across ranks and the status line counts what is shown", "[gui][viewer]") {
  auto app = make_app(1000, 500, "timeline");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  frames(*app, 3);
  CHECK(st.links_drawn == 1);  // rank 0's all_reduce seq 1 to rank 1's
  const Image img = grab(*app, "links.png");
  const int y0 = static_cast<int>(row_y(st, 0, LaneKind::Collective)), y1 = static_cast<int>(row_y(st, 1, LaneKind::Collective));
  REQUIRE(y0 > 0);
  REQUIRE(y1 > y0);
  // The link runs from rank 0's collective (centre 600 us) down to rank 1's (centre 675 us).
  const int xa = static_cast<int>(x_of(st, us(600))) - 3, xb = static_cast<int>(x_of(st, us(675))) + 3;
  // The line is anti-aliased: count pixels of its hue, which no lane colour has.
  const auto linkish = [&](int x0, int ya, int x1, int yb) {
    int n = 0;
    for (int y = std::max(0, ya); y < std::min(img.h, yb); ++y)
      for (int x = std::max(0, x0); x < std::min(img.w, x1); ++x) {
        const pal::Rgb c = img.at(x, y);
        n += std::abs(c.r - pal::kLink.r) <= 70 && std::abs(c.g - pal::kLink.g) <= 70 && std::abs(c.b - pal::kLink.b) <= 70 &&
             c.b > c.r && c.r > c.g;
      }
    return n;
  };
  CHECK(linkish(xa, y0 + 8, xb, y1 - 8) > (y1 - y0) / 3);
  CHECK(linkish(0, y0 + 8, xa - 20, y1 - 8) == 0);  // and nowhere else between the rows
  // Status line: events, ranks, drops.
  INFO(st.status_line);
  CHECK(st.status_line.find("events " + std::to_string(st.tl.event_count) + "  ranks 2") == 0);
  CHECK(st.status_line.find("drops 0") != std::string::npos);
}
