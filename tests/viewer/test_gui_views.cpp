// Screenshots of each pane from the hand-built fixture, checked on features: lane colours where
// the events are, and the memory curve's height at known times. Plus a shared PyTorch snapshot,
// and the command-line headless modes (screenshot, bad input, bench).
#include "gui_fixture.hpp"
#include "json_text.hpp"

#include <nlohmann/json.hpp>
#include <stb/stb_image.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace gui_test;
using namespace memcomm::view;
namespace pal = memcomm::view::palette;

TEST_CASE("timeline screenshot: lane colours sit where the events are", "[gui][viewer]") {
  auto app = make_app(1200, 500, "timeline");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  st.zoom_to(0, us(1000));
  frames(*app, 3);
  const Image img = grab(*app, "timeline.png");
  const int y0 = 0, y1 = img.h;
  auto col = [&](double t_us) { return static_cast<int>(x_of(st, us(t_us))); };
  const float k0 = row_y(st, 0, LaneKind::Kernel), m0 = row_y(st, 0, LaneKind::Memcpy);
  const float c0 = row_y(st, 0, LaneKind::Collective), c1 = row_y(st, 1, LaneKind::Collective);
  const float p0 = row_y(st, 0, LaneKind::Phase, 1);  // forward/backward sit under the step
  REQUIRE((k0 > 0 && m0 > 0 && c0 > 0 && c1 > 0 && p0 > 0));
  // Kernels on rank 0's stream row at 200 us and 600 us, not at 400 us (between them).
  CHECK(img.at(col(200), static_cast<int>(k0)).r == pal::kKernel.r);
  CHECK(img.count(col(200) - 3, static_cast<int>(k0) - 3, col(200) + 3, static_cast<int>(k0) + 3, pal::kKernel) > 20);
  CHECK(img.count(col(600) - 3, static_cast<int>(k0) - 3, col(600) + 3, static_cast<int>(k0) + 3, pal::kKernel) > 20);
  CHECK(img.count(col(400) - 3, static_cast<int>(k0) - 3, col(400) + 3, static_cast<int>(k0) + 3, pal::kKernel) == 0);
  // Memcpy only at 300..350 us.
  CHECK(img.count(col(325) - 2, static_cast<int>(m0) - 3, col(325) + 2, static_cast<int>(m0) + 3, pal::kMemcpy) > 10);
  CHECK(img.count(col(600) - 2, static_cast<int>(m0) - 3, col(600) + 2, static_cast<int>(m0) + 3, pal::kMemcpy) == 0);
  // Phases: forward colour at 200 us, backward at 600 us.
  CHECK(img.count(col(200) - 2, static_cast<int>(p0) - 3, col(200) + 2, static_cast<int>(p0) + 3, pal::kPhase[static_cast<int>(memcomm::prof::Phase::Forward)]) > 10);
  CHECK(img.count(col(600) - 2, static_cast<int>(p0) - 3, col(600) + 2, static_cast<int>(p0) + 3, pal::kPhase[static_cast<int>(memcomm::prof::Phase::Backward)]) > 10);
  // Collectives: rank 0's in the collective colour at 550 us; rank 1 arrived last, so its one is
  // highlighted as the straggler at 720 us, where rank 0's has ended.
  CHECK(img.count(col(550) - 2, static_cast<int>(c0) - 3, col(550) + 2, static_cast<int>(c0) + 3, pal::kCollective) > 10);
  CHECK(img.count(col(720) - 2, static_cast<int>(c1) - 3, col(720) + 2, static_cast<int>(c1) + 3, pal::kStraggler) > 10);
  CHECK(img.count(col(720) - 2, static_cast<int>(c0) - 3, col(720) + 2, static_cast<int>(c0) + 3, pal::kCollective) == 0);
  CHECK_FALSE(img.column_has(col(550), y0, y1, pal::kStraggler));  // rank 1 has not started yet
}

TEST_CASE("memory screenshot: the allocated curve's height matches the known values", "[gui][viewer]") {
  auto app = make_app(1000, 400, "memory");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  st.zoom_to(0, us(1000));
  frames(*app, 3);
  const Image img = grab(*app, "memory.png");
  REQUIRE(st.mem_y1 > st.mem_y0);
  REQUIRE(st.mem_ymax == Approx(1024 * kMiB * 1.05));  // reserved 1 GiB + 5% headroom
  auto expected_top = [&](double bytes) {
    return st.mem_y1 - static_cast<float>(bytes / st.mem_ymax) * (st.mem_y1 - st.mem_y0);
  };
  // Below the curve is allocated colour; the topmost allocated pixel is the value (the active
  // line, drawn over the edge, may cover a pixel or two).
  struct Probe {
    double t_us, bytes;
  };
  for (const Probe p : {Probe{350, 256 * kMiB}, Probe{650, 768 * kMiB}, Probe{900, 512 * kMiB}}) {
    const int x = static_cast<int>(x_of(st, us(p.t_us)));
    const int top = img.topmost(x, static_cast<int>(st.mem_y0), static_cast<int>(st.mem_y1), pal::kAllocated);
    INFO("t " << p.t_us << " us, x " << x);
    REQUIRE(top >= 0);
    CHECK(std::abs(top - expected_top(p.bytes)) <= 3.0f);
    // Filled down to the axis.
    CHECK(img.at(x, static_cast<int>(st.mem_y1) - 2).g == pal::kAllocated.g);
  }
  // Before the first allocation nothing is allocated.
  const int x_early = static_cast<int>(x_of(st, us(100)));
  const int top_early = img.topmost(x_early, static_cast<int>(st.mem_y0), static_cast<int>(st.mem_y1) - 3, pal::kAllocated);
  CHECK(top_early == -1);
}

TEST_CASE("allocator state screenshot: the segment bar shows its blocks at the cursor", "[gui][viewer]") {
  auto app = make_app(900, 300, "allocator");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  st.alloc_follow_cursor = false;
  st.alloc_time = us(600);  // blocks of 256 MiB and 512 MiB allocated in a 1 GiB segment
  frames(*app, 3);
  Image img = grab(*app, "allocator.png");
  const int alloc_px = img.count(0, 0, img.w, img.h, pal::kBlockAllocated);
  const int free_px = img.count(0, 0, img.w, img.h, pal::kSegmentFree);
  CHECK(alloc_px > 0);
  CHECK(free_px > 0);
  // 768 of 1024 MiB allocated: three quarters of the bar.
  CHECK(static_cast<double>(alloc_px) / (alloc_px + free_px) == Approx(0.75).margin(0.03));
  // Scrub back to 300 us: only the first block remains; rebuilt from a checkpoint, not all events.
  st.alloc_time = us(300);
  frames(*app, 2);
  img = grab(*app, "allocator_300us.png");
  const int alloc2 = img.count(0, 0, img.w, img.h, pal::kBlockAllocated);
  CHECK(static_cast<double>(alloc2) / (alloc2 + img.count(0, 0, img.w, img.h, pal::kSegmentFree)) == Approx(0.25).margin(0.03));
  CHECK(st.alloc[0]->last_seek_cost() <= 2);
}

TEST_CASE("step table and summary render from the fixture", "[gui][viewer]") {
  auto app = make_app(1000, 400, "steps,summary");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  frames(*app, 3);
  grab(*app, "steps_summary.png");
  REQUIRE(st.steps.size() == 4);  // 2 steps x 2 ranks
  CHECK(st.steps[0].comm == us(200));
  CHECK(st.step_row0_y > 0);
  CHECK(st.summary.stragglers[1] == 1);
}

TEST_CASE("a shared PyTorch snapshot opens and renders", "[gui][viewer]") {
  const std::string path = memcomm::test::shared_snapshots_dir() + "/magma27__memory_snapshot.pickle";
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  auto app = make_app(1200, 700, "");
  app->start_load({path});
  for (int i = 0; i < 2000 && app->loading(); ++i) app->frame();
  AppState& st = app->state();
  REQUIRE_FALSE(st.tl.empty());
  // Show the allocator state at the peak of allocated memory.
  const CounterSeries* allocated = st.tl.ranks[0].counter("allocated");
  REQUIRE(allocated);
  for (std::size_t i = 0; i < allocated->size(); ++i)
    if (allocated->value(i) == allocated->global_max()) st.alloc_time = allocated->time(i);
  st.alloc_follow_cursor = false;
  frames(*app, 3);
  INFO(nlohmann::json(st.messages).dump());
  CHECK(st.messages.empty());
  REQUIRE_FALSE(st.tl.empty());
  CHECK(st.tl.ranks[0].alloc_events.size() > 100);
  const Image img = grab(*app, "snapshot.png");
  // The memory pane shows allocated memory and the allocator pane shows blocks.
  CHECK(img.count(0, static_cast<int>(st.mem_y0), img.w, static_cast<int>(st.mem_y1), pal::kAllocated) > 100);
  CHECK(img.count(0, static_cast<int>(st.mem_y1), img.w, img.h, pal::kBlockAllocated) > 0);
}

TEST_CASE("memcomm-view --screenshot writes a PNG of the requested size", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string png = out_dir() + "/cli_synthetic.png";
  std::filesystem::remove(png);
  std::string out;
  REQUIRE(run_viewer("--synthetic 50000 --screenshot " + png + " --frames 3 --size 800x600", &out) == 0);
  int w = 0, h = 0, c = 0;
  unsigned char* px = stbi_load(png.c_str(), &w, &h, &c, 4);
  REQUIRE(px != nullptr);
  stbi_image_free(px);
  CHECK(w == 800);
  CHECK(h == 600);
}

TEST_CASE("memcomm-view keeps running on a corrupt file and reports it", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string bad = out_dir() + "/corrupt.mct";
  {
    std::ofstream f(bad, std::ios::binary);
    f << std::string("MEMCTRC\x1A", 8) << std::string(200, '\x55');  // right magic, garbage header
  }
  const std::string garbage = out_dir() + "/garbage.bin";
  std::ofstream(garbage) << "this is not a trace";
  const std::string report = out_dir() + "/corrupt_report.json";
  std::string out;
  const int rc = run_viewer(bad + " " + garbage + " --synthetic 20000 --screenshot " + out_dir() + "/corrupt.png --report-json " +
                                report,
                            &out);
  INFO(out);
  CHECK(rc == 2);  // a headless run is a check: an input it cannot load is a usage error (--help)
  CHECK(out.find(bad) != std::string::npos);      // on stderr, naming the file
  CHECK(out.find(garbage) != std::string::npos);
  const auto j = memcomm::test::read_json(report);
  REQUIRE(j["messages"].size() == 2);            // and in the UI
  CHECK(j["messages"][0].get<std::string>().find("corrupt.mct") != std::string::npos);
  CHECK(j["events"].get<std::uint64_t>() > 0);  // the rest still loaded and shown
}

TEST_CASE("memcomm-view rejects bad usage with exit code 2", "[gui][viewer]") {
  std::string out;
  CHECK(run_viewer("--size banana", &out) == 2);
  CHECK(out.find("--size") != std::string::npos);
  const std::string script = out_dir() + "/bad.script";
  std::ofstream(script) << "move 10 10\nfly 3\n";
  CHECK(run_viewer("--script " + script, &out) == 2);
  CHECK(out.find("bad.script:2") != std::string::npos);
}

TEST_CASE("memcomm-view --bench reports frame build percentiles", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string report = out_dir() + "/bench.json";
  std::string out;
  REQUIRE(run_viewer("--bench --synthetic 100000 --bench-frames 40 --size 800x600 --report-json " + report, &out) == 0);
  CHECK(out.find("p95") != std::string::npos);
  const auto j = memcomm::test::read_json(report);
  CHECK(j["build_ms"]["p95"].get<double>() > 0);
  CHECK(j["bytes_per_event"].get<double>() > 0);
}
