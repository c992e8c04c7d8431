// Driving the real UI through input scripts: File > Open, a dropped file, the search box, the
// large-file prompt; and what the panes draw: linked collectives, the status line.
#include "view_traces.hpp"

#include <memcomm/view/app/input_script.hpp>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace gui_test;
using namespace memcomm::view;
namespace pal = memcomm::view::palette;

namespace {


std::uint64_t span_total(const AppState& st) {
  std::uint64_t n = 0;
  for (const auto& rd : st.tl.ranks)
    for (const auto& l : rd.lanes) n += l.span_count();
  return n;
}

}  // namespace

TEST_CASE("File > Open: the menu then the path typed in the dialog and Enter load it", "[gui][viewer]") {
  const std::string trace = view_traces::write_steps(out_dir() + "/open_dialog.mct");
  auto app = make_app(1000, 600, "");
  frames(*app, 2);
  AppState& st = app->state();
  REQUIRE(st.file_menu.y >= 0);
  run_script_and_load(*app, "click " + at(st.file_menu) + "\nframes 2\n");
  REQUIRE(st.open_item.y >= 0);  // the menu is open
  run_script_and_load(*app, "click " + at(st.open_item) + "\nframes 2\ntype " + trace + "\nkey enter\nframes 2\n");
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
  run_script_and_load(*app, "drop " + trace + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(has_source(st, trace));
  CHECK(st.tl.ranks.size() >= 2);  // the fixture's ranks stay
  CHECK(span_total(st) > 1100);
}

TEST_CASE("a file open already is not loaded again as a second rank", "[gui][viewer]") {
  // Dropped again, or given twice, its events came back as a made-up rank of the same run.
  const std::string trace = view_traces::write_steps(out_dir() + "/twice.mct");
  const std::string link = out_dir() + "/twice_link.mct";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(trace, link);
  auto app = make_app(1000, 600, "");
  AppState& st = app->state();
  run_script_and_load(*app, "drop " + trace + "\nframes 2\n");
  const std::size_t ranks = st.tl.ranks.size(), spans = span_total(st);
  run_script_and_load(*app, "drop " + trace + "\nframes 2\ndrop " + link + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(st.tl.ranks.size() == ranks);
  CHECK(span_total(st) == spans);
  CHECK(std::count_if(st.messages.begin(), st.messages.end(), [](const std::string& m) {
          return m.find("is open already: not loaded again") != std::string::npos;
        }) == 2);
}

TEST_CASE("a second file's rank 0 shown as another rank is said, in one load or dropped later", "[gui][viewer]") {
  // Both files name rank 0: the second was shown as rank 1 with no word (memcomm-trace refuses the pair).
  const std::string a = view_traces::write_steps(out_dir() + "/rank0_a.mct");
  const std::string b = view_traces::write_steps(out_dir() + "/rank0_b.mct");
  const std::string c = view_traces::write_steps(out_dir() + "/rank0_c.mct");
  auto app = make_app(1000, 600, "");
  AppState& st = app->state();
  run_script_and_load(*app, "drop " + a + "\ndrop " + b + "\nframes 2\n");
  run_script_and_load(*app, "drop " + c + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  REQUIRE(st.tl.ranks.size() == 3);
  for (const auto& [file, shown] : {std::pair<std::string, int>{b, 1}, {c, 2}})
    CHECK(std::count(st.messages.begin(), st.messages.end(),
                     "warning: " + file + ": rank 0 is shown as rank " + std::to_string(shown) +
                         ": another file holds rank 0 too") == 1);
}

TEST_CASE("memcomm-view --listen FILE is a usage error, not an address to resolve", "[gui][viewer]") {
  const std::string trace = view_traces::write_steps(out_dir() + "/listen_file.mct");
  std::string out;
  CHECK(run_viewer("--listen " + trace + " --exit-after-events 1 --timeout 5", &out) == 2);
  CHECK(out.find("--listen takes HOST:PORT") != std::string::npos);
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
  run_script_and_load(app, "click " + at(st.range_from) + "\nframes 1\ntype 0.2\nclick " + at(st.range_to) +
                      "\nframes 1\ntype 0.2995\nframes 1\nclick " + at(st.range_load) + "\nframes 2\n");
  INFO(nlohmann::json(st.messages).dump());
  CHECK(span_total(st) == 10 * 11);
  CHECK(st.range_load.y < 0);  // the prompt is gone
}

TEST_CASE("the search box: typed text outlines the matching spans and counts them", "[gui][viewer]") {
  auto app = make_app(1000, 500, "timeline");
  AppState& st = app->state();
  st.set_timeline(make_fixture(), false);
  frames(*app, 2);
  REQUIRE(st.search_box.y >= 0);
  const Image before = grab(*app, "search_before.png");
  run_script_and_load(*app, "click " + at(st.search_box) + "\nframes 1\ntype gemm\nframes 2\nmove 5 " +
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

// memcomm-view's command line and headless exit codes (--help: 0 ok, 1 runtime failure, 2 usage
// error, which in the headless modes includes an input file that cannot be loaded).
TEST_CASE("script counts are whole non-negative numbers: no wrap of -5 to 2^64-5", "[gui][viewer]") {
  for (const std::string bad : {"wait-events -5", "wait-events 5 -1", "wait-events 5 inf", "wait-events 5 nan",
                                "wait-events 5x", "frames -1", "frames 2000000", "wait -3", "key w -3", "key w 0",
                                "key w abc", "frames 99999999999999999999", "move 10 20 30", "click 10 10 left junk",
                                "wheel 1 200", "wheel 1 2 3 4", "screenshot -", "screenshot a.png b.png"}) {
    std::vector<ScriptCommand> cmds;
    std::string error;
    INFO(bad);
    CHECK_FALSE(parse_script(bad + "\n", "s", cmds, error));
    CHECK(error.find("s:1:") != std::string::npos);
  }
  std::vector<ScriptCommand> cmds;
  std::string error;
  REQUIRE(parse_script("wait-events 18446744073709551615 0.5\nkey w 3\nkey a\nframes 0\n", "s", cmds, error));
  REQUIRE(cmds.size() == 4);
  CHECK(cmds[0].events == 18446744073709551615ull);
  CHECK(cmds[0].timeout_s == 0.5);
  CHECK(cmds[1].frames == 3);
  CHECK(cmds[2].frames == 1);
  CHECK(cmds[3].frames == 0);
  // A comment starts at a '#' that begins the line or follows a blank: a name's own '#' stays.
  cmds.clear();
  REQUIRE(parse_script("# setup\ntype ProfilerStep#551\ndrop a#b.mct  # the second run\nclick 10 10 # there\n", "s", cmds,
                       error));
  REQUIRE(cmds.size() == 6);  // type, drop, and click's move, frame, down and up
  CHECK(cmds[0].path == "ProfilerStep#551");
  CHECK(cmds[1].path == "a#b.mct");
}

TEST_CASE("a script's wait-events timeout and a failed screenshot are counted as failures", "[gui][viewer]") {
  auto app = make_app(400, 300, "");
  app->state().set_timeline(make_fixture(), false);
  frames(*app, 2);
  std::vector<ScriptCommand> cmds;
  std::string error;
  // A 0 s timeout: the wait ends at its first check, whatever the clock says. The screenshot's folder
  // is there when the script is read (a missing one is a usage error then) and gone when it runs.
  const std::string gone = out_dir() + "/script_gone";
  std::filesystem::create_directories(gone);
  REQUIRE(parse_script("wait-events 999999999 0\nscreenshot " + gone + "/s.png\nframes 1\n", "t", cmds, error));
  std::filesystem::remove_all(gone);
  app->set_script(std::move(cmds));
  for (int i = 0; i < 50 && !app->script_done(); ++i) app->frame();
  REQUIRE(app->script_done());
  CHECK(app->script_failures() == 2);
  const auto& msgs = app->state().messages;
  INFO(nlohmann::json(msgs).dump());
  REQUIRE(msgs.size() == 2);
  CHECK(msgs[0].find("timed out") != std::string::npos);
  CHECK(msgs[1].find("script line 2") != std::string::npos);
}

TEST_CASE("headless memcomm-view exits 2 on an input file it cannot load, still writing the screenshot", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string dir = out_dir() + "/inputs_dir";
  std::filesystem::create_directories(dir);
  const std::string empty = out_dir() + "/inputs_empty.mct";
  std::ofstream(empty).close();
  const std::string corrupt = out_dir() + "/inputs_corrupt.mct";
  std::ofstream(corrupt, std::ios::binary) << std::string("MEMCTRC\x1A", 8) << std::string(64, '\x11');
  const std::string missing = out_dir() + "/inputs_missing.mct";
  std::filesystem::remove(missing);
  const std::string fifo = out_dir() + "/inputs_fifo.mct";  // Note [Inputs are regular files]: open() blocked
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {missing, "cannot open"}, {empty, "empty file"}, {dir, "is a folder, not a file"},
      {fifo, "not a regular file"}, {corrupt, "inputs_corrupt.mct"}};
  int n = 0;
  for (const auto& [input, says] : cases) {
    const std::string png = out_dir() + "/inputs_bad_" + std::to_string(n++) + ".png";
    std::filesystem::remove(png);
    std::string out;
    const int rc = run_viewer(input + " --size 320x200 --screenshot " + png, &out);
    INFO(input << " -> " << out);
    CHECK(rc == 2);
    CHECK(out.find(input) != std::string::npos);
    CHECK(out.find(says) != std::string::npos);
    if (says != "empty file") CHECK(out.find("empty file") == std::string::npos);  // a directory is not "empty"
    CHECK(std::filesystem::exists(png));  // the empty view is still written
  }
  // --bench and --script report a bad input the same way.
  std::string out;
  CHECK(run_viewer(missing + " --bench --bench-frames 4 --size 320x200", &out) == 2);
  const std::string script = out_dir() + "/inputs_ok.script";
  std::ofstream(script) << "frames 1\n";
  CHECK(run_viewer(missing + " --size 320x200 --script " + script, &out) == 2);
  // --exit-after-events waited out its whole --timeout after a load failure, then exited 2.
  const std::string report = out_dir() + "/inputs_bad.json";
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_viewer(empty + " --size 320x200 --exit-after-events 1 --timeout 120 --report-json " + report, &out) == 2);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  CHECK(std::filesystem::exists(report));
  // Files that load but hold fewer events than asked for: as soon as they are loaded, not at --timeout.
  const std::string few = view_traces::write_steps(out_dir() + "/inputs_few.mct");
  const auto t1 = std::chrono::steady_clock::now();
  CHECK(run_viewer(few + " --size 320x200 --exit-after-events 1000000 --timeout 120 --report-json " + report, &out) == 1);
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(60));
  CHECK(out.find("short of --exit-after-events 1000000") != std::string::npos);
}

TEST_CASE("headless memcomm-view exits 1 on a script timeout, a failed script screenshot or an unwritable report",
          "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const std::string timeout = out_dir() + "/inputs_timeout.script";
  std::ofstream(timeout) << "wait-events 999999999 0\n";
  std::string out;
  CHECK(run_viewer("--synthetic 1000 --size 320x200 --script " + timeout, &out) == 1);
  CHECK(out.find("timed out") != std::string::npos);
  // A script's screenshot into a folder that does not exist is refused as the script is read (exit 2),
  // as --screenshot's is; one that fails as it is written (a full disk) fails the run (exit 1).
  const std::string shot = out_dir() + "/inputs_shot.script";
  std::ofstream(shot) << "frames 1\nscreenshot " << out_dir() << "/no/such/dir/x.png\n";
  const int shot_rc = run_viewer("--synthetic 1000 --size 320x200 --script " + shot, &out);
  INFO(out);  // what the viewer said, should the check below fail (it did once in CI, under load)
  CHECK(shot_rc == 2);
  CHECK(out.find("no/such/dir/x.png: the folder") != std::string::npos);
  if (std::filesystem::exists("/dev/full")) {
    const std::string full = out_dir() + "/inputs_full.script";
    std::ofstream(full) << "frames 1\nscreenshot /dev/full\n";
    CHECK(run_viewer("--synthetic 1000 --size 320x200 --script " + full, &out) == 1);
    CHECK(out.find("No space left on device") != std::string::npos);
  }
  // --frames alone opened a window that never exited.
  CHECK(run_viewer("--synthetic 1000 --frames 3", &out) == 2);
  CHECK(out.find("--frames needs --screenshot or --script") != std::string::npos);
  // A --report-json or --screenshot whose folder does not exist is refused before any work (exit 2).
  for (const char* flag : {"--report-json", "--screenshot"}) {
    CHECK(run_viewer("--bench --synthetic 1000 --bench-frames 4 --size 320x200 " + std::string(flag) + " " + out_dir() +
                         "/no/such/dir/b.out",
                     &out) == 2);
    CHECK(out.find(std::string(flag) + " " + out_dir() + "/no/such/dir/b.out: the folder") != std::string::npos);
  }
  // An output that is an input (by any name) replaced the trace with a PNG or the report, exit 0.
  const std::string input = out_dir() + "/inputs_is_output.mct";
  std::filesystem::copy_file(std::string(MEMCOMM_SOURCE_DIR) + "/tests/allocator/data/trainer_mlp_accum2.rank1.mct", input,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string link = out_dir() + "/inputs_is_output_link.mct";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(input, link);
  const auto size = std::filesystem::file_size(input);
  for (const std::string& out_path : {input, link}) {
    for (const std::string& outputs : {"--screenshot " + out_path, "--screenshot " + out_dir() + "/f.png --report-json " + out_path}) {
      CHECK(run_viewer("--frames 1 --size 320x200 " + outputs + " " + input, &out) == 2);
      CHECK(out.find("output " + out_path + " is also an input") != std::string::npos);
    }
    const std::string script = out_dir() + "/inputs_is_output.script";
    std::ofstream(script) << "frames 1\nscreenshot " << out_path << "\n";
    CHECK(run_viewer("--size 320x200 --script " + script + " " + input, &out) == 2);
    CHECK(out.find("inputs_is_output.script:2: screenshot: output " + out_path + " is also an input") != std::string::npos);
  }
  // A trace the script drops is an input too, of its screenshots and of --screenshot.
  const std::string dropping = out_dir() + "/inputs_drop_is_output.script";
  std::ofstream(dropping) << "drop " << input << "\nframes 1\nscreenshot " << link << "\n";
  CHECK(run_viewer("--size 320x200 --script " + dropping, &out) == 2);
  CHECK(out.find("inputs_drop_is_output.script:3: screenshot: output " + link + " is also an input") != std::string::npos);
  std::ofstream(dropping) << "drop " << input << "\nframes 1\n";
  CHECK(run_viewer("--size 320x200 --screenshot " + input + " --script " + dropping, &out) == 2);
  CHECK(out.find("--screenshot " + input + ": output " + input + " is also an input") != std::string::npos);
  CHECK(std::filesystem::file_size(input) == size);
  CHECK(run_viewer("--synthetic 1000 --size 320x200 --screenshot " + out_dir() + "/f.png --frames 100000000", &out) == 2);
  CHECK(out.find("--frames must be 1..1000000") != std::string::npos);
  // stb's file writer ignored write errors: a full disk gave a 0-byte PNG and exit 0.
  if (std::filesystem::exists("/dev/full")) {
    CHECK(run_viewer("--synthetic 1000 --size 320x200 --screenshot /dev/full", &out) == 1);
    CHECK(out.find("No space left on device") != std::string::npos);
    CHECK(run_viewer("--bench --synthetic 1000 --bench-frames 4 --size 320x200 --report-json /dev/full", &out) == 1);
    CHECK(out.find("cannot write the report") != std::string::npos);
  }
  // A --listen address that cannot be used ends a headless run at once, not after its --timeout.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(run_viewer("--listen nonsense.invalid:7433 --exit-after-events 1 --timeout 120", &out) == 1);
  CHECK(out.find("--listen nonsense.invalid:7433: cannot resolve") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  // A script that passes still exits 0.
  const std::string ok = out_dir() + "/inputs_pass.script";
  std::ofstream(ok) << "wait-events 1 30\nframes 1\nscreenshot " << out_dir() << "/inputs_pass.png\n";
  CHECK(run_viewer("--synthetic 1000 --size 320x200 --script " + ok, &out) == 0);
  CHECK(std::filesystem::exists(out_dir() + "/inputs_pass.png"));
}

TEST_CASE("memcomm-view --script refuses a directory with exit 2", "[gui][viewer]") {
  const std::string dir = out_dir() + "/inputs_script_dir";
  std::filesystem::create_directories(dir);
  std::string out;
  CHECK(run_viewer("--synthetic 1000 --script " + dir, &out) == 2);
  CHECK(out.find("is a directory") != std::string::npos);
}

#if defined(MEMCOMM_TEST_BENCH_MAKE_TRACE)
TEST_CASE("bench_make_trace answers --help and refuses flags instead of writing a file named after them",
          "[gui][viewer]") {
  const std::string tool = std::string(MEMCOMM_BINARY_DIR) + "/bin/bench_make_trace";
  const std::string cwd = out_dir() + "/make_trace_cwd";
  std::filesystem::remove_all(cwd);  // an earlier run's small.mct
  std::filesystem::create_directories(cwd);
  const auto run = [&](const std::string& args) {
    const int st = std::system(("cd " + cwd + " && " + tool + " " + args + " >/dev/null 2>&1").c_str());
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  };
  CHECK(run("--help") == 0);
  CHECK(run("-x") == 2);
  CHECK(run("out.mct --events") == 2);
  CHECK(run("out.mct abc") == 2);
  CHECK(run("out.mct 1e12") == 2);
  CHECK(run("out.mct 1000 0") == 2);
  CHECK(run("") == 2);
  CHECK(std::filesystem::is_empty(cwd));  // none of them wrote anything
  CHECK(run("small.mct 2000 2") == 0);
  CHECK(std::filesystem::file_size(cwd + "/small.mct") > 0);
}
#endif
