// memcomm-view: memory and communication timelines of data-parallel training, from memcomm traces
// and PyTorch memory snapshots (files), or live from running ranks (--listen).
#include <memcomm/view/app/app.hpp>

#include <memcomm/profiler/stream_protocol.hpp>

#include <CLI/CLI.hpp>
#include <memcomm/common/cli_checks.hpp>
#include <memcomm/common/replacing_file.hpp>
#include <memcomm/common/standard_output.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <new>
#include <regex>
#include <string>
#include <utility>

namespace {
// "WxH" with both in 64..16384. Digits are counted before converting, so a value too large for an
// int (99999999999x900) is refused here rather than thrown out of std::stoi.
bool parse_size(const std::string& text, int& w, int& h) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex(R"((\d{1,5})x(\d{1,5}))"))) return false;
  w = std::stoi(m[1]);
  h = std::stoi(m[2]);
  return w >= 64 && h >= 64 && w <= 16384 && h <= 16384;
}

// Note [Synthetic bound]: --synthetic N builds the whole model in memory (tens of bytes per event);
// 10^8 events is well past what the benches use (10^6) and still fits a workstation, while an
// unbounded N ends in bad_alloc.
constexpr std::uint64_t kMaxSyntheticEvents = 100'000'000;

// Flags that arrive as text and are checked after parsing.
struct FlagText {
  std::string size;
  std::string range;
  bool frames_given = false;
};

void add_options(CLI::App& app, memcomm::view::AppOptions& o, FlagText& text) {
  app.add_option("files", o.files, "memcomm traces (.mct), torch.profiler traces (.json, .json.gz) and PyTorch snapshot pickles to open");
  // No default_str: help would print "=127.0.0.1:7433" as if the viewer always listened (check_options
  // gives a bare --listen its address).
  app.add_option("--listen", o.listen,
                 "accept live streams from ranks on HOST:PORT; a bare --listen means 127.0.0.1:7433 "
                 "(without --listen the viewer does not listen)")
      ->expected(0, 1);
  app.add_option("--size", text.size, "window size WxH (default 1600x900; --bench default 1920x1080)");
  app.add_option("--screenshot", o.screenshot, "write a PNG of the window after --frames frames and exit");
  app.add_option("--frames", o.frames, "frames to render before the screenshot/exit (default 3)");
  auto* bench = app.add_flag("--bench", o.bench, "print frame build times for a scripted zoom/pan sweep and exit");
  app.add_option("--bench-frames", o.bench_frames, "with --bench: frames in the sweep, 4 or more (default 400)")
      ->check(CLI::Range(4, 1'000'000))
      ->needs(bench);
  app.add_option("--script", o.script, "input script injected through ImGui's io before each frame");
  auto* exit_events =
      app.add_option("--exit-after-events", o.exit_after_events, "exit once this many (1 or more) events are loaded/received")
          ->check(memcomm::whole_number(1));
  app.add_option("--exit-after-ranks", o.exit_after_ranks,
                 "with --exit-after-events: also wait until this many ranks have spans on the timeline")
      ->check(memcomm::whole_number(1))
      ->needs(exit_events);
  app.add_option("--timeout", o.exit_timeout_s,
                 "with --exit-after-events: give up after S seconds, S > 0 (exit 1; default 30)")
      ->check(memcomm::positive_number())
      ->needs(exit_events);
  app.add_option("--report-json", o.report_json,
                 "write what was received and shown (tooltips, ranks, drops) as JSON when the viewer exits (with a "
                 "window: when it is closed)");
  auto* synthetic =
      app.add_option("--synthetic", o.synthetic, "add a synthetic run of about N events, 1..100000000 (benchmarks, demos)")
          ->check(CLI::Range(std::uint64_t{1}, kMaxSyntheticEvents));
  app.add_option("--synthetic-ranks", o.synthetic_ranks, "with --synthetic: ranks in the synthetic run, 1..1024 (default 2)")
      ->check(CLI::Range(1u, 1024u))
      ->needs(synthetic);
  app.add_option("--range", text.range,
                 "T0:T1: load only events overlapping this range, seconds from the first event of each trace "
                 "(for very large files; without it, files over 1 GiB opened in a window ask first)");
  app.add_option("--panes", o.panes, "comma list of panes to show: timeline,memory,allocator,steps,summary,allocations "
                                     "(default: all but allocations, which a file with stacks, a PyTorch snapshot, adds)");
}

// Checks across flags and the ones CLI11 cannot: a message and false on a usage error.
bool check_options(memcomm::view::AppOptions& opt, const FlagText& text, bool listen_given) {
  if (listen_given && opt.listen.empty()) opt.listen = "127.0.0.1:7433";
  std::error_code ec;
  if (!opt.listen.empty() && std::filesystem::exists(opt.listen, ec)) {  // `--listen run.mct`: the file taken as the address
    std::fprintf(stderr, "memcomm-view: --listen takes HOST:PORT, and '%s' is a file: give the files before --listen, "
                         "or the address as --listen=HOST:PORT\n", opt.listen.c_str());
    return false;
  }
  if (!opt.listen.empty()) {
    try {
      (void)memcomm::prof::parse_endpoint(opt.listen);  // a bad address is a usage error, not a UI message
    } catch (const std::exception& e) {
      std::fprintf(stderr, "memcomm-view: --listen: %s\n", e.what());
      return false;
    }
  }
  std::string error;
  memcomm::view::Panes panes;
  if (!memcomm::view::parse_panes(opt.panes, panes, error)) {
    std::fprintf(stderr, "memcomm-view: %s\n", error.c_str());
    return false;
  }
  if (!text.size.empty()) {
    int w = 0, h = 0;
    if (!parse_size(text.size, w, h)) {
      std::fprintf(stderr, "memcomm-view: --size must be WxH with 64..16384 each, got '%s'\n", text.size.c_str());
      return false;
    }
    opt.width = w;
    opt.height = h;
  } else if (opt.bench) {
    opt.width = 1920;
    opt.height = 1080;
  }
  if (!text.range.empty() && !memcomm::view::parse_time_range(text.range, opt.load, error)) {
    std::fprintf(stderr, "memcomm-view: %s\n", error.c_str());
    return false;
  }
  if (opt.frames < 1 || opt.frames > 1'000'000) {
    std::fprintf(stderr, "memcomm-view: --frames must be 1..1000000\n");
    return false;
  }
  if (text.frames_given && opt.screenshot.empty() && opt.script.empty()) {  // a window would never exit
    std::fprintf(stderr, "memcomm-view: --frames needs --screenshot or --script\n");
    return false;
  }
  // Outputs checked before any work (Note [Outputs replaced whole]): a folder that does not exist, a
  // folder given as the file, or '-', which is no file here. One that is an input: App::run, which
  // knows the script's dropped files too.
  for (const auto& [flag, file] : {std::pair<const char*, const std::string&>{"--screenshot", opt.screenshot},
                                   {"--report-json", opt.report_json}}) {
    const std::string problem = file.empty() ? "" : memcomm::replace_problem(file);
    if (!problem.empty()) {
      std::fprintf(stderr, "memcomm-view: %s %s: %s\n", flag, file.c_str(), problem.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  memcomm::view::AppOptions opt;
  CLI::App cli{
      "memcomm-view: timelines of GPU memory and communication in data-parallel training.\n"
      "Opens memcomm traces (.mct) and torch.profiler traces (.json, .json.gz; one file per rank), all\n"
      "ranks merged on one timeline, and PyTorch memory snapshot pickles; more files can be opened with\n"
      "File > Open or by dropping them on the window.\n"
      "Keys: wheel zooms at the mouse, drag pans, W/S zoom, A/D pan, right-drag selects a range.\n"
      "The Summary pane shows the advisor's advice and the analysis tables by running memcomm-trace advise\n"
      "and report (found next to memcomm-view, else on PATH) on the loaded traces.\n"
      "Headless modes (hidden window; under CI run them with xvfb-run -a):\n"
      "  --screenshot PNG [--frames N] [--size WxH]   render N frames after loading, write PNG, exit\n"
      "  --bench [--synthetic N]                      frame build times p50/p95/max over a zoom/pan sweep\n"
      "  --script FILE                                inject mouse/keys before each frame (see below)\n"
      "  --exit-after-events N [--exit-after-ranks R] --report-json FILE\n"
      "                                               exit once N events arrived (from R ranks), report what was shown\n"
      "Large traces: --range T0:T1 loads only that time range (seconds from the start).\n"
      "Script commands, one per line: move X Y | down/up [left|right] | click X Y [button] |\n"
      "  drag X0 Y0 X1 Y1 [button] | wheel DY [X Y] | key K [N] | frames N | wait-events N [S] |\n"
      "  screenshot PNG | type TEXT | drop PATH.\n"
      "Exit codes: 0 ok; 1 runtime failure (no display, --timeout or a script's wait-events timed out, files that\n"
      "  hold fewer events than --exit-after-events with nothing listening for more, a script's\n"
      "  screenshot or --screenshot/--report-json could not be written, e.g. a full disk); 2 usage error (bad flags,\n"
      "  a --screenshot/--report-json path whose folder does not exist or that is a folder, checked first; a script\n"
      "  that cannot be read or parsed, and in the headless modes an input file that cannot be loaded: missing,\n"
      "  empty, a folder, not a regular file or corrupt; the screenshot and report are still written)."};
  FlagText text;
  add_options(cli, opt, text);
  try {
    memcomm::refuse_empty_values(cli);
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e) == 0 ? memcomm::stdout_checked(0, "memcomm-view") : 2;  // Note [Output that was not written]
  }
  text.frames_given = cli.count("--frames") > 0;
  if (!check_options(opt, text, cli.count("--listen") > 0)) return 2;
  // Nothing may abort: an exception out of the run (bad_alloc on a huge input, a library's error)
  // is a runtime failure with a message.
  try {
    memcomm::view::App app(std::move(opt));
    return app.run();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "memcomm-view: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memcomm-view: %s\n", e.what());
  }
  return 1;
}
