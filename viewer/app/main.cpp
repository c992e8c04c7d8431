// memcomm-view: memory and communication timelines of data-parallel training, from memcomm traces
// and PyTorch memory snapshots (files), or live from running ranks (--listen).
#include <memcomm/view/app/app.hpp>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <regex>

int main(int argc, char** argv) {
  memcomm::view::AppOptions opt;
  CLI::App cli{
      "memcomm-view: timelines of GPU memory and communication in data-parallel training.\n"
      "Opens memcomm traces (.mct, one or many ranks, merged on one timeline) and PyTorch memory\n"
      "snapshot pickles; more files can be opened with File > Open or by dropping them on the window.\n"
      "Keys: wheel zooms at the mouse, drag pans, W/S zoom, A/D pan, right-drag selects a range.\n"
      "Headless modes (hidden window; under CI run them with xvfb-run -a):\n"
      "  --screenshot PNG [--frames N] [--size WxH]   render N frames after loading, write PNG, exit\n"
      "  --bench [--synthetic N]                      frame build times p50/p95/max over a zoom/pan sweep\n"
      "  --script FILE                                inject mouse/keys before each frame (see below)\n"
      "  --exit-after-events N [--exit-after-ranks R] --report-json FILE\n"
      "                                               exit once N events arrived (from R ranks), report what was shown\n"
      "Large traces: --range T0:T1 loads only that time range (seconds from the start).\n"
      "Script commands, one per line: move X Y | down/up [left|right] | click X Y [button] |\n"
      "  drag X0 Y0 X1 Y1 [button] | wheel DY [X Y] | key K [N] | frames N | wait-events N [S] |\n"
      "  screenshot PNG.  Exit codes: 0 ok, 1 runtime failure (no display, timeout), 2 usage error."};
  cli.add_option("files", opt.files, "memcomm traces (.mct) and PyTorch snapshot pickles to open");
  cli.add_option("--listen", opt.listen,
                 "accept live streams from ranks on HOST:PORT (default 127.0.0.1:7433 when given empty); "
                 "needs the profiler's live receiver, which this build reports when missing")
      ->expected(0, 1)
      ->default_str("127.0.0.1:7433");
  std::string size;
  cli.add_option("--size", size, "window size WxH (default 1600x900; --bench default 1920x1080)");
  cli.add_option("--screenshot", opt.screenshot, "write a PNG of the window after --frames frames and exit");
  cli.add_option("--frames", opt.frames, "frames to render before the screenshot/exit (default 3)");
  cli.add_flag("--bench", opt.bench, "print frame build times for a scripted zoom/pan sweep and exit");
  cli.add_option("--bench-frames", opt.bench_frames, "frames in the bench sweep (default 400)");
  cli.add_option("--script", opt.script, "input script injected through ImGui's io before each frame");
  cli.add_option("--exit-after-events", opt.exit_after_events, "exit once this many events are loaded/received");
  cli.add_option("--exit-after-ranks", opt.exit_after_ranks,
                 "with --exit-after-events: also wait until this many ranks have spans on the timeline");
  cli.add_option("--timeout", opt.exit_timeout_s, "give up waiting for --exit-after-events after S seconds (exit 1)");
  cli.add_option("--report-json", opt.report_json, "write what was received and shown (tooltips, ranks, drops) as JSON");
  cli.add_option("--synthetic", opt.synthetic, "add a synthetic run of about N events (benchmarks, demos)");
  cli.add_option("--synthetic-ranks", opt.synthetic_ranks, "ranks in the synthetic run (default 2)");
  std::string range;
  cli.add_option("--range", range,
                 "T0:T1: load only events overlapping this range, seconds from the first event of each trace "
                 "(for very large files; without it, files over 1 GiB opened in a window ask first)");
  cli.add_option("--panes", opt.panes, "comma list of panes to show: timeline,memory,allocator,steps,summary");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e) == 0 ? 0 : 2;
  }
  if (cli.count("--listen") && opt.listen.empty()) opt.listen = "127.0.0.1:7433";
  if (!size.empty()) {
    std::smatch m;
    if (!std::regex_match(size, m, std::regex(R"((\d+)x(\d+))")) || std::stoi(m[1]) < 64 || std::stoi(m[2]) < 64 ||
        std::stoi(m[1]) > 16384 || std::stoi(m[2]) > 16384) {
      std::fprintf(stderr, "memcomm-view: --size must be WxH with 64..16384 each, got '%s'\n", size.c_str());
      return 2;
    }
    opt.width = std::stoi(m[1]);
    opt.height = std::stoi(m[2]);
  } else if (opt.bench) {
    opt.width = 1920;
    opt.height = 1080;
  }
  if (!range.empty()) {
    std::string error;
    if (!memcomm::view::parse_time_range(range, opt.load, error)) {
      std::fprintf(stderr, "memcomm-view: %s\n", error.c_str());
      return 2;
    }
  }
  if (opt.frames < 1) {
    std::fprintf(stderr, "memcomm-view: --frames must be >= 1\n");
    return 2;
  }
  memcomm::view::App app(std::move(opt));
  return app.run();
}
