// The Summary pane's advice (Note [Advice in a child process]): memcomm-trace advise and report over
// the loaded traces, the tuner's probes from tune.* counters, and what the pane says when the
// tool is missing. Also memcomm-view's usage errors (exit 2).
#include "json_text.hpp"
#include "view_traces.hpp"

#include <memcomm/view/app/advice.hpp>
#include <memcomm/view/app/input_script.hpp>
#include <memcomm/view/builder.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace gui_test;
using namespace memcomm::view;

namespace {
// Frames until the load and the advisor are done (each frame polls both).
void settle(App& app) {
  for (int i = 0; i < 3000 && (app.loading() || app.state().advice.state == AdviceResult::State::Running); ++i) {
    app.frame();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  frames(app, 2);
}
}  // namespace

TEST_CASE("tune_probes pairs each probe's counters and OOM probes have no peak or step time", "[gui][viewer]") {
  TimelineBuilder b;
  b.phase(0, "step", 0, 1000);
  b.counter(1, "tune.micro_batch", 10, 4);
  b.counter(1, "tune.oom", 11, 0);
  b.counter(1, "tune.peak_reserved", 12, 1e6);
  b.counter(1, "tune.step_ms", 13, 3.5);
  b.counter(1, "tune.micro_batch", 20, 64);
  b.counter(1, "tune.oom", 21, 1);
  b.counter(1, "tune.micro_batch", 30, 16);
  b.counter(1, "tune.oom", 31, 0);
  b.counter(1, "tune.peak_reserved", 32, 4e6);
  b.counter(1, "tune.step_ms", 33, 9);
  const Timeline tl = b.finish("tune");
  std::uint32_t rank = 99;
  const auto p = tune_probes(tl, rank);
  CHECK(rank == 1);
  REQUIRE(p.size() == 3);
  CHECK(p[0].micro_batch == 4);
  CHECK_FALSE(p[0].oom);
  CHECK(p[0].peak_reserved == 1e6);
  CHECK(p[0].step_ms == 3.5);
  CHECK(p[1].micro_batch == 64);
  CHECK(p[1].oom);
  CHECK(p[1].peak_reserved < 0);  // the OOM probe records neither: the next probe's are not borrowed
  CHECK(p[1].step_ms < 0);
  CHECK(p[2].micro_batch == 16);
  CHECK(p[2].peak_reserved == 4e6);
  CHECK(p[2].step_ms == 9);
  std::uint32_t none = 7;
  CHECK(tune_probes(gui_test::make_fixture(), none).empty());
}

TEST_CASE("parse_advice_json reads memcomm-trace advise --json and refuses anything else", "[gui][viewer]") {
  std::vector<AdviceItem> a;
  std::string error;
  REQUIRE(parse_advice_json(R"([{"topic":"data","change":"more workers","evidence":"waits 3 ms","saving":3.0,"saving_unit":"ms/step"}])",
                            a, error));
  REQUIRE(a.size() == 1);
  CHECK(a[0].topic == "data");
  CHECK(a[0].saving == 3.0);
  CHECK(parse_advice_json("[]", a, error));
  CHECK(a.empty());
  CHECK_FALSE(parse_advice_json("{\"topic\":1}", a, error));
  CHECK_FALSE(parse_advice_json("nothing to change", a, error));
  CHECK(error.find("advice JSON") != std::string::npos);
}

TEST_CASE("loaded_trace_files keeps the loaded .mct files only", "[gui][viewer]") {
  const std::string trace = view_traces::write_steps(out_dir() + "/advice_files.mct");
  const std::string text = out_dir() + "/advice_files.txt";
  std::ofstream(text) << "not a trace";
  const auto files = loaded_trace_files({trace, text, trace, out_dir() + "/advice_missing.mct"},
                                        {trace + " (range 0.000..1.000 s)", text});
  REQUIRE(files.size() == 1);
  CHECK(files[0] == trace);
  CHECK(loaded_trace_files({trace}, {trace + "x"}).empty());  // another file whose name starts alike
}

TEST_CASE("memcomm-view shows the advisor's advice and the tuner's probes from a trace", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  const auto files = view_traces::write_exposed_run(out_dir() + "/advice_run");
  const std::string report = out_dir() + "/advice_report.json";
  std::string out;
  const int rc = run_viewer(files[0] + " " + files[1] + " --panes summary,steps --size 1200x700 --screenshot " + out_dir() +
                                "/advice.png --report-json " + report,
                            &out);
  INFO(out);
  REQUIRE(rc == 0);
  const auto j = memcomm::test::read_json(report);
  const auto& a = j["advice"];
  INFO(a.dump(2));
  REQUIRE(a["state"] == "done");
  CHECK(a["files"].size() == 2);
  bool comm = false;
  for (const auto& it : a["items"])
    if (it["topic"] == "communication") {
      comm = true;
      CHECK(it["evidence"].get<std::string>().find("waits for communication") != std::string::npos);
      CHECK_FALSE(it["change"].get<std::string>().empty());
      CHECK(it["saving"].get<double>() > 0);
      CHECK(it["saving_unit"] == "ms/step");
    }
  CHECK(comm);
  // The analysis tables of memcomm-trace report, for both ranks.
  const std::string tables = a["report"].get<std::string>();
  CHECK(tables.find("Temporal breakdown") != std::string::npos);
  const auto& t = j["tuner"];
  CHECK(t["rank"] == 0);
  REQUIRE(t["probes"].size() == 3);
  CHECK(t["probes"][0]["micro_batch"] == 8);
  CHECK(t["probes"][0]["peak_reserved"].get<double>() == 100.0 * (1 << 20));
  CHECK(t["probes"][1]["step_ms"].get<double>() == 20);
  CHECK(t["probes"][2]["oom"] == true);
}

TEST_CASE("a trace whose name starts with '-' gets its advice", "[gui][viewer]") {
  if (!std::getenv("DISPLAY")) MEMCOMM_SKIP_TEST("no DISPLAY (run under xvfb-run -a)");
  // memcomm-trace took "-h.rank0.mct" for an option ("unreadable advice JSON"): the files follow "--".
  const auto files = view_traces::write_exposed_run(out_dir() + "/dash_run");
  const std::string name = "-h.rank0.mct";  // in the working folder the viewer inherits
  std::filesystem::copy_file(files[0], name, std::filesystem::copy_options::overwrite_existing);
  const std::string report = out_dir() + "/dash_report.json";
  std::string out;
  const int rc = run_viewer("--panes summary --size 800x600 --screenshot " + out_dir() + "/dash.png --report-json " + report +
                                " -- " + name,
                            &out);
  std::filesystem::remove(name);
  INFO(out);
  REQUIRE(rc == 0);
  const auto a = memcomm::test::read_json(report)["advice"];
  INFO(a.dump(2));
  CHECK(a["state"] == "done");
}

TEST_CASE("without memcomm-trace the Summary says why there is no advice", "[gui][viewer]") {
  const auto files = view_traces::write_exposed_run(out_dir() + "/advice_notool");
  AppOptions o;
  o.width = 900;
  o.height = 500;
  o.hidden = true;
  o.panes = "summary";
  o.trace_tool = out_dir() + "/no-such-dir/memcomm-trace";
  App app(o);
  std::string why;
  if (!app.open_window(why)) MEMCOMM_SKIP_TEST(why);
  app.start_load(files);
  settle(app);
  const AdviceResult& a = app.state().advice;
  CHECK(a.state == AdviceResult::State::Failed);
  CHECK(a.error.find("no-such-dir/memcomm-trace") != std::string::npos);
  CHECK(app.state().tl.event_count > 0);  // the traces themselves are shown
  // "Advice unavailable:" in red in the Summary (the default font has no anti-aliasing).
  const Image img = grab(app, "advice_no_tool.png");
  CHECK(img.count(0, 0, img.w, img.h, memcomm::view::palette::Rgb{255, 102, 102}) > 20);
}

TEST_CASE("traces too large to advise on at once wait for the Summary's button", "[gui][viewer]") {
  const auto files = view_traces::write_exposed_run(out_dir() + "/advice_button");
  AppOptions o;
  o.width = 900;
  o.height = 600;
  o.hidden = true;
  o.panes = "summary";
  o.range_prompt_bytes = 64;  // "large" for this test
  o.trace_tool = std::string(MEMCOMM_BINARY_DIR) + "/bin/memcomm-trace";
  if (!std::filesystem::exists(o.trace_tool)) MEMCOMM_SKIP_TEST("memcomm-trace is not built");
  App app(o);
  std::string why;
  if (!app.open_window(why)) MEMCOMM_SKIP_TEST(why);
  app.start_load(files);
  settle(app);
  AppState& st = app.state();
  REQUIRE(st.advice.state == AdviceResult::State::Waiting);
  REQUIRE(st.advice_button.y >= 0);
  std::vector<ScriptCommand> click;
  std::string error;
  REQUIRE(parse_script("click " + std::to_string(st.advice_button.x) + " " + std::to_string(st.advice_button.y) + "\nframes 2\n",
                       "test", click, error));
  app.set_script(std::move(click));
  for (int i = 0; i < 100 && !app.script_done(); ++i) app.frame();
  settle(app);
  INFO(st.advice.error);
  REQUIRE(st.advice.state == AdviceResult::State::Done);
  CHECK(st.advice.files == files);
  CHECK_FALSE(st.advice.advice.empty());
  CHECK(st.advice_button.y < 0);  // the button is gone
}

TEST_CASE("a PyTorch snapshot alone gets the snapshot advice, without the trace report", "[gui][viewer]") {
  // The shared snapshot with an OOM: whatever else the replay says, the OOM rule always speaks.
  const std::string path = memcomm::test::shared_snapshots_dir() + "/code_location__memory_snapshot.pickle";
  if (!std::filesystem::exists(path)) MEMCOMM_SKIP_TEST("shared snapshot not found: " + path);
  AppOptions o;
  o.width = 800;
  o.height = 400;
  o.hidden = true;
  o.panes = "summary";
  o.trace_tool = std::string(MEMCOMM_BINARY_DIR) + "/bin/memcomm-trace";
  if (!std::filesystem::exists(o.trace_tool)) MEMCOMM_SKIP_TEST("memcomm-trace is not built");
  App app(o);
  std::string why;
  if (!app.open_window(why)) MEMCOMM_SKIP_TEST(why);
  app.start_load({path});
  settle(app);
  if (app.state().tl.empty()) MEMCOMM_SKIP_TEST("this build has no snapshot reader");
  const AdviceResult& a = app.state().advice;
  CHECK(a.files == std::vector<std::string>{path});
  INFO(a.error);
  REQUIRE(a.state == AdviceResult::State::Done);
  CHECK(a.report.empty());  // memcomm-trace report reads traces only
  CHECK(std::any_of(a.advice.begin(), a.advice.end(), [](const AdviceItem& it) { return it.topic == "oom"; }));
}

TEST_CASE("memcomm-view refuses bad flags with exit code 2 and a message", "[gui][viewer]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--panes timeline,bogus", "bogus"},
      {"--panes bogus", "bogus"},
      {"--panes timeline,", "empty pane name"},
      {"--listen nonsense:port", "bad port"},
      {"--exit-after-events 5 --timeout -1", "--timeout"},
      {"--exit-after-events 0", "--exit-after-events"},
      {"--exit-after-ranks 2", "--exit-after-events"},
      {"--timeout 5", "--exit-after-events"},
      {"--bench --bench-frames 0", "--bench-frames"},
      {"--bench-frames 100", "--bench"},
      {"--synthetic 100 --synthetic-ranks 0", "--synthetic-ranks"},
      // Out of range: these aborted (std::stoi's out_of_range, bad_alloc) before they were checked.
      {"--size 99999999999x900", "--size"},
      {"--size 900x99999999999", "--size"},
      {"--size 63x900", "--size"},
      {"--size 16385x900", "--size"},
      {"--synthetic 99999999999", "--synthetic"},
      {"--synthetic 0", "--synthetic"},
  };
  for (const auto& [args, says] : cases) {
    std::string out;
    const int rc = run_viewer(args, &out);
    INFO(args << " -> " << out);
    CHECK(rc == 2);
    CHECK(out.find(says) != std::string::npos);
  }
  Panes p;
  std::string error;
  CHECK(parse_panes("memory,steps", p, error));
  CHECK((!p.timeline && p.memory && !p.allocator && p.steps && !p.summary));
  CHECK(parse_panes("", p, error));
  CHECK((p.timeline && p.memory && p.allocator && p.steps && p.summary));
}

namespace {
// A stand-in for memcomm-trace: a shell script with `body`, executable, in the test's output folder.
std::string fake_tool(const std::string& name, const std::string& body) {
  const std::string path = out_dir() + "/" + name;
  {
    std::ofstream f(path);
    f << "#!/bin/sh\n" << body << "\n";
  }
  namespace fs = std::filesystem;
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add);
  return path;
}
// Waits for the job (bounded: a hung job fails the test instead of hanging it).
bool wait_done(const AdviceJob& job) {
  for (int i = 0; i < 6000 && !job.done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return job.done();
}
}  // namespace

TEST_CASE("an advisor that runs past its time limit is killed and the pane says it timed out", "[gui][viewer]") {
  // Ignores SIGTERM and would run for a minute: only SIGKILL at the deadline ends it.
  const std::string tool = fake_tool("advise_hangs.sh", "trap '' TERM\nexec sleep 60");
  AdviceJob job(tool, {}, {}, 1.0);
  REQUIRE(wait_done(job));
  const AdviceResult r = job.take();
  INFO(r.error);
  CHECK(r.state == AdviceResult::State::Failed);
  CHECK(r.error.find("memcomm-trace advise timed out") != std::string::npos);
}

TEST_CASE("an advisor whose output passes the cap is stopped even when it ignores SIGTERM", "[gui][viewer]") {
  // Output past the cap from a child that ignores SIGTERM and SIGPIPE, then goes on running: it
  // takes SIGKILL after SIGTERM's grace to end it.
  const std::string tool =
      fake_tool("advise_floods.sh", "trap '' TERM PIPE\nyes 0123456789abcdef | head -c 20000000\nexec sleep 60");
  AdviceJob job(tool, {}, {}, 600.0);  // the cap, not the time limit, must stop it
  REQUIRE(wait_done(job));
  const AdviceResult r = job.take();
  INFO(r.error);
  CHECK(r.state == AdviceResult::State::Failed);
  CHECK(r.error.find("MiB; stopped it") != std::string::npos);
}
