// App::run: what the command line asks for (interactive, --screenshot, --script, --bench,
// --exit-after-events), including the idle policy: no redraw while nothing changes.
#include <memcomm/view/app/app.hpp>
#include <memcomm/view/synthetic.hpp>

#include <memcomm/common/json_output.hpp>
#include <memcomm/common/output_path.hpp>
#include <memcomm/common/percentile.hpp>  // Note [Nearest-rank percentile]: the frame-time p50/p95

#include "clock.hpp"
#include "views.hpp"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>
#include <imgui.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>
#include <utility>

namespace memcomm::view {

namespace {
// The files opened, the script and the files it drops are the inputs (see Note [Outputs that would
// destroy data]) of --screenshot, --report-json and the script's screenshots. Returns what to refuse, or "".
std::string input_overwritten(const AppOptions& opt, const std::vector<ScriptCommand>& script) {
  std::vector<std::string> inputs = opt.files;
  if (!opt.script.empty()) inputs.push_back(opt.script);
  for (const ScriptCommand& c : script)
    if (c.op == ScriptCommand::Op::Drop) inputs.push_back(c.path);
  for (const ScriptCommand& c : script)
    if (c.op == ScriptCommand::Op::Screenshot)
      if (const std::string conflict = output_conflict(c.path, inputs, false); !conflict.empty())
        return fmt::format("{}:{}: screenshot: {}", opt.script, c.line, conflict);
  for (const auto& [flag, file] : {std::pair<const char*, const std::string&>{"--screenshot", opt.screenshot},
                                   {"--report-json", opt.report_json}})
    if (const std::string conflict = file.empty() ? "" : output_conflict(file, inputs, false); !conflict.empty())
      return fmt::format("{} {}: {}", flag, file, conflict);
  return "";
}

std::size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4096;
}
}  // namespace

int App::run() {
  const bool headless = !opt_.screenshot.empty() || opt_.bench || !opt_.script.empty() || opt_.exit_after_events > 0;
  if (headless) opt_.hidden = true;
  std::vector<ScriptCommand> script;
  if (!opt_.script.empty()) {
    std::string error;
    if (!load_script(opt_.script, script, error)) {
      std::fprintf(stderr, "memcomm-view: %s\n", error.c_str());
      return 2;
    }
  }
  if (const std::string overwritten = input_overwritten(opt_, script); !overwritten.empty()) {
    std::fprintf(stderr, "memcomm-view: %s\n", overwritten.c_str());
    return 2;
  }
  std::string error;
  if (!open_window(error)) {
    std::fprintf(stderr, "memcomm-view: %s\n", error.c_str());
    return 1;
  }
  const std::size_t rss0 = rss_bytes();
  if (opt_.synthetic > 0) {
    const double t0 = now_s();
    SyntheticOptions so;
    so.events = opt_.synthetic;
    so.ranks = opt_.synthetic_ranks;
    st_.set_timeline(make_synthetic(so), true);
    synth_s_ = now_s() - t0;
  }
  start_load(opt_.files);
  if (!opt_.listen.empty()) {
    std::string live_error;
    if (!start_live(live_error)) {
      // Headless with nothing else to show, nothing could ever arrive: waiting out --timeout would
      // only hide why.
      if (headless && opt_.files.empty() && opt_.synthetic == 0) {
        std::fprintf(stderr, "memcomm-view: --listen %s: %s\n", opt_.listen.c_str(), live_error.c_str());
        return 1;
      }
      st_.message(live_error);  // in a window, the viewer still shows its files
    }
  }
  if (opt_.bench) return run_bench();
  set_script(std::move(script));

  const int rc = write_outputs(frame_loop(headless));
  (void)rss0;
  return headless ? headless_exit_code(rc) : rc;  // in a window, the messages were the report
}

// Frames until the window closes or, headless, until the data is loaded and the script, the frame
// count or --exit-after-events is done. Returns 1 on a --timeout, else 0.
int App::frame_loop(bool headless) {
  const double start = now_s();
  std::uint64_t frames_after_load = 0;
  int rc = 0;
  // Only a --report-json run waits for the advisor (the report holds its advice); a screenshot
  // shows the Summary as it is. The job has its own time limit (AdviceJob), so the wait is bounded.
  const bool wait_advice = !opt_.report_json.empty();
  while (!glfwWindowShouldClose(window_)) {
    const bool data_loaded = !load_ && pending_drops_.empty();
    if (headless && data_loaded && wait_advice && advice_job_ && script_done())
      glfwWaitEventsTimeout(0.05);  // only the advisor's child is left: sleep (its end posts an empty event)
    else
      wait_for_work(headless);
    frame();
    const bool loaded = !load_ && pending_drops_.empty() && !(wait_advice && advice_job_);
    if (loaded) ++frames_after_load;
    if (!headless) continue;
    if (opt_.exit_after_events > 0) {
      if (loaded && events_seen() >= opt_.exit_after_events && ranks_with_spans() >= opt_.exit_after_ranks &&
          script_done()) {
        if (live_) {  // publish the last arrivals before reporting
          std::vector<std::string> msgs;
          live_->poll(msgs, 1e300);
          for (const auto& m : msgs) st_.message(m);
          st_.appended(live_->publish(st_.tl));
          if (live_->refresh_allocations(st_.tl)) st_.allocations_rebuilt();  // Note [Live allocations]
          frame();
        }
        break;
      }
      // Every file is loaded, some failed, and nothing listens: no event can come any more, and waiting
      // out --timeout only delayed the load error's exit status.
      if (loaded && load_errors_ > 0 && !live_ && events_seen() < opt_.exit_after_events) break;
      // Files only, all loaded, the script done: what they hold is all there will be.
      if (loaded && !live_ && script_done()) {
        const std::string of_ranks = opt_.exit_after_ranks > 0 ? fmt::format(" from {} ranks", opt_.exit_after_ranks) : "";
        st_.message(fmt::format("the files hold {} events from {} ranks, short of --exit-after-events {}{}, and "
                                "nothing listens for more (--listen)", events_seen(), ranks_with_spans(),
                                opt_.exit_after_events, of_ranks));
        rc = 1;
        break;
      }
      if (now_s() - start > opt_.exit_timeout_s) {
        std::string ranks = fmt::format("{} ranks", ranks_with_spans());  // "of R" only when --exit-after-ranks asked
        if (opt_.exit_after_ranks > 0) ranks = fmt::format("{} of {} ranks", ranks_with_spans(), opt_.exit_after_ranks);
        st_.message(fmt::format("timed out after {:.0f} s with {} of {} events from {}", opt_.exit_timeout_s,
                                events_seen(), opt_.exit_after_events, ranks));
        rc = 1;
        break;
      }
      continue;
    }
    if (!loaded || !script_done()) continue;
    if (frames_after_load >= static_cast<std::uint64_t>(std::max(1, opt_.frames))) break;
  }
  return rc;
}

// The screenshot and the report, whatever the run's outcome; 1 if one cannot be written, else rc.
int App::write_outputs(int rc) {
  // The report holds the allocations as of the last arrivals, however the run ended (--timeout, a
  // closed window), not as of the last paced rebuild (Note [Live allocations]).
  if (live_ && !opt_.report_json.empty() && live_->refresh_allocations(st_.tl)) st_.allocations_rebuilt();
  if (!opt_.screenshot.empty()) {
    std::string err;
    if (!write_png(opt_.screenshot, err)) {
      std::fprintf(stderr, "memcomm-view: %s\n", err.c_str());
      rc = 1;
    }
  }
  if (!opt_.report_json.empty() && !write_report(report_json())) rc = 1;
  return rc;
}

// Note [Headless exit codes]: a headless run is a check, so what the window would only show as a
// message becomes the exit code (after the screenshot and report are written, so nothing is lost):
// an input file that could not be loaded is a usage error (2), as a bad flag is; a failed script
// command (a wait-events timeout, a screenshot that could not be written) is a runtime failure (1).
int App::headless_exit_code(int rc) const {
  if (load_errors_ > 0) {
    std::fprintf(stderr, "memcomm-view: %llu input file(s) could not be loaded\n",
                 static_cast<unsigned long long>(load_errors_));
    return 2;
  }
  if (script_failures_ > 0 && rc == 0) {
    std::fprintf(stderr, "memcomm-view: %llu script command(s) failed\n", static_cast<unsigned long long>(script_failures_));
    return 1;
  }
  return rc;
}

// Frame times of run_bench()'s sweep, one entry per frame.
struct App::BenchFrames {
  std::vector<double> build, build_cpu, total, marks;
};

App::BenchFrames App::bench_sweep(int n) {
  BenchFrames f;
  // Scripted sweep: zoom in x1000 around the middle, pan, zoom out, then pan at 1/20 of the run,
  // with the mouse over the timeline so hover/tooltips are exercised.
  const TimeNs b = st_.tl.begin, e = st_.tl.end, span = std::max<TimeNs>(e - b, 1);
  const int q = n / 4;
  mouse_x_ = static_cast<float>(opt_.width) * 0.55f;
  mouse_y_ = 200;
  ScriptCommand hold;  // keeps apply_script injecting the mouse during the sweep
  hold.op = ScriptCommand::Op::Frames;
  hold.frames = n + 1;
  script_.push_back(hold);
  script_pos_ = 0;
  st_.zoom_to(b, e);
  for (int i = 0; i < n; ++i) {
    const TimeNs mid = b + span / 2;
    if (i < q) {
      st_.zoom_at(mid, std::pow(1e-3, 1.0 / q));
    } else if (i < 2 * q) {
      st_.pan((st_.view_t1 - st_.view_t0) / 10);
    } else if (i < 3 * q) {
      st_.zoom_at(st_.view_t0 + (st_.view_t1 - st_.view_t0) / 2, std::pow(1e3, 1.0 / q));
    } else {
      const TimeNs w = span / 20;
      const TimeNs t0 = b + static_cast<TimeNs>(static_cast<double>(span - w) * (i - 3 * q) / std::max(1, n - 3 * q));
      st_.zoom_to(t0, t0 + w);
    }
    glfwPollEvents();
    frame();
    f.build.push_back(st_.build_ms);
    f.build_cpu.push_back(st_.build_cpu_ms);
    f.total.push_back(st_.frame_ms);
    f.marks.push_back(static_cast<double>(st_.drawn_marks));
  }
  return f;
}

int App::run_bench() {
  const double t_load0 = now_s();
  if (st_.tl.empty() && !load_) {
    SyntheticOptions so;
    so.events = 1'000'000;
    st_.set_timeline(make_synthetic(so), true);
  }
  // Load without drawing: on llvmpipe a frame costs ~100 ms of the same two cores the loader uses.
  while (load_ && !load_->done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double read_s = load_ ? load_->seconds() : 0;
  poll_load();  // takes the result and indexes it (allocator checkpoints, step table, summary)
  // Load = ingest + index (builder, LOD levels, allocator checkpoints, step table) of the data;
  // the first frame (font atlas, GL upload on llvmpipe) is reported apart.
  const double load_s = synth_s_ > 0 ? synth_s_ : now_s() - t_load0;
  const double f0 = now_s();
  frame();
  const double first_frame_s = now_s() - f0;
  for (int i = 0; i < 10; ++i) {  // warm-up: font atlas, first layouts
    glfwPollEvents();
    frame();
  }
  const int n = std::max(4, opt_.bench_frames);  // main() refuses fewer than 4
  const BenchFrames f = bench_sweep(n);
  const std::vector<double>&build = f.build, &build_cpu = f.build_cpu, &total = f.total, &marks = f.marks;
  std::size_t model = st_.tl.memory_bytes();
  for (const auto& a : st_.alloc) model += a->memory_bytes();
  const double events = static_cast<double>(st_.tl.event_count);
  double mean_marks = 0;
  for (double m : marks) mean_marks += m;
  mean_marks /= static_cast<double>(marks.size());
  nlohmann::json j;
  j["events"] = st_.tl.event_count;
  j["size"] = fmt::format("{}x{}", opt_.width, opt_.height);
  j["frames"] = n;
  j["build_ms"] = {{"p50", percentile(build, 0.5)}, {"p95", percentile(build, 0.95)}, {"max", percentile(build, 1.0)}};
  j["build_cpu_ms"] = {{"p50", percentile(build_cpu, 0.5)}, {"p95", percentile(build_cpu, 0.95)}, {"max", percentile(build_cpu, 1.0)}};
  j["frame_ms_with_gl"] = {{"p50", percentile(total, 0.5)}, {"p95", percentile(total, 0.95)}, {"max", percentile(total, 1.0)}};
  j["marks_per_frame"] = mean_marks;
  j["model_bytes"] = model;
  j["bytes_per_event"] = events > 0 ? static_cast<double>(model) / events : 0;
  j["rss_bytes"] = rss_bytes();
  j["load_s"] = load_s;
  j["load_read_s"] = read_s;
  j["first_frame_s"] = first_frame_s;
  j["load_events_per_s"] = load_s > 0 ? events / load_s : 0;
  std::printf("memcomm-view bench: %.0f events at %dx%d, %d frames (zoom x1000 in, pan, zoom out, pan)\n", events,
              opt_.width, opt_.height, n);
  std::printf("  frame build, CPU time (NewFrame..Render):   p50 %.3f ms  p95 %.3f ms  max %.3f ms\n",
              percentile(build_cpu, 0.5), percentile(build_cpu, 0.95), percentile(build_cpu, 1.0));
  std::printf("  frame build, wall clock (NewFrame..Render): p50 %.3f ms  p95 %.3f ms  max %.3f ms\n", percentile(build, 0.5),
              percentile(build, 0.95), percentile(build, 1.0));
  std::printf("  frame incl. GL draw (llvmpipe), wall:      p50 %.3f ms  p95 %.3f ms  max %.3f ms\n", percentile(total, 0.5),
              percentile(total, 0.95), percentile(total, 1.0));
  std::printf("  marks drawn per frame (mean): %.0f\n", mean_marks);
  std::printf("  model memory: %.1f MB = %.1f B/event (process RSS %.1f MB)\n", static_cast<double>(model) / 1e6,
              events > 0 ? static_cast<double>(model) / events : 0, static_cast<double>(rss_bytes()) / 1e6);
  std::printf("  load (ingest + index): %.3f s = %.1f M events/s (files read and built %.3f s; first frame %.3f s)\n", load_s,
              load_s > 0 ? events / load_s / 1e6 : 0, read_s, first_frame_s);
  int rc = 0;
  if (!opt_.report_json.empty() && !write_report(json_text(j, 2))) rc = 1;
  return headless_exit_code(rc);
}

}  // namespace memcomm::view
