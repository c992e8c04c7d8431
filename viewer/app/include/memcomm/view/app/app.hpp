// memcomm-view's application: one GLFW window, Dear ImGui 1.86 with its GLFW + OpenGL3 backends,
// and the panes (timeline, memory over time, allocator state, step table, summary, status line).
// Headless modes (hidden window): --screenshot, --bench, --script, --exit-after-events.
#pragma once

#include <memcomm/view/app/app_state.hpp>
#include <memcomm/view/app/input_script.hpp>
#include <memcomm/view/loader.hpp>
#include <memcomm/view/live.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

struct GLFWwindow;

namespace memcomm::view {

struct AppOptions {
  std::vector<std::string> files;   // traces and snapshots to open (merged)
  std::string listen;               // HOST:PORT for live streams ("" = off)
  int width = 1600, height = 900;   // window size (--size)
  bool hidden = false;              // hidden window (set by the headless modes)
  std::string screenshot;           // PNG written after `frames` frames, then exit
  int frames = 3;                   // frames to render before the screenshot
  bool bench = false;               // frame-build timing over a scripted zoom/pan sweep
  int bench_frames = 400;
  std::string script;               // input script (input_script.hpp)
  std::uint64_t exit_after_events = 0;  // exit once this many events arrived (0: off)
  std::uint32_t exit_after_ranks = 0;   // ... and this many ranks have spans on the timeline
  double exit_timeout_s = 30;
  std::string report_json;          // what was received/shown, written at exit
  std::uint64_t synthetic = 0;      // generate a synthetic run of about N events
  std::uint32_t synthetic_ranks = 2;
  std::string panes;                // comma list of panes to show ("" = all)
  LoadOptions load;                 // --range (time range to load) and loader knobs
  // Files at least this large, opened with a visible window and no --range, first ask for a time
  // range (issue 6: "for very large files, a time range can be chosen before the full load").
  std::uint64_t range_prompt_bytes = kRangePromptBytes;
  // memcomm-trace, run for the Summary's analysis and advice ("" = next to memcomm-view, else on
  // PATH; Note [Advice in a child process]). Traces at least range_prompt_bytes in all wait for the
  // pane's button instead of running at once. --bench never runs it.
  std::string trace_tool;
};

class App {
 public:
  explicit App(AppOptions opt);
  ~App();
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  // Everything the command line asks for; returns the process exit code.
  int run();

  // Building blocks (used by run() and by in-process tests).
  bool open_window(std::string& error);  // false when there is no display / GL 3.3 core
  void frame();                          // input (script), UI build, render
  bool read_pixels(std::vector<std::uint8_t>& rgba_top_down, int& w, int& h);
  bool write_png(const std::string& path, std::string& error);
  // --report-json: `text` replaces the file whole; false (after a message on stderr) when it cannot.
  bool write_report(const std::string& text) const;
  std::string report_json() const;
  void start_load(std::vector<std::string> paths);
  std::vector<std::string> not_open_yet(std::vector<std::string> paths);
  bool loading() const { return load_ != nullptr; }
  void set_script(std::vector<ScriptCommand> script) { script_ = std::move(script); script_pos_ = 0; }
  bool script_done() const { return script_pos_ >= script_.size() && script_hold_ == 0; }
  // Files that could not be loaded (missing, empty, a directory, corrupt) since the App started;
  // run() turns any into exit code 2 in the headless modes.
  std::uint64_t load_errors() const { return load_errors_; }
  // Script commands that failed (a wait-events timeout, a screenshot that could not be written);
  // run() turns any into exit code 1.
  std::uint64_t script_failures() const { return script_failures_; }

  // Starts listening on options().listen now (run() does this itself): in-process benches/tests.
  bool listen(std::string& error) { return start_live(error); }
  std::uint16_t live_port() const;  // 0 when not listening
  AppState& state() { return st_; }
  const AppOptions& options() const { return opt_; }
  std::uint64_t frames_rendered() const { return frames_; }
  // True when the interactive loop would sleep until input (Note [Idle while listening]).
  bool idle() const;
  // Times the live waker saw new arrivals and woke the window (Note [Idle while listening]).
  std::uint64_t live_wakes() const { return live_wakes_.load(); }

 private:
  void build_ui();
  // The parts of build_ui(), top to bottom (main_window.cpp).
  void draw_menu_bar();
  void draw_open_popup();
  void draw_toolbar();
  void draw_panes();
  // The parts of run() and run_bench() (app_run.cpp).
  int frame_loop(bool headless);
  int write_outputs(int rc);
  struct BenchFrames;
  BenchFrames bench_sweep(int n);
  void poll_load();
  void show_allocations_for_stacks();  // after a load: snapshots open with the allocation panes
  void warn_about_mixed_runs();  // after a load: files that look like several runs'
  void poll_live();
  void refresh_live_allocations();  // Note [Live allocations]
  bool start_live(std::string& error);
  std::uint64_t events_seen() const;  // received live, else loaded
  std::uint32_t ranks_with_spans() const;  // ranks with at least one span on the timeline
  void apply_script();
  void wait_for_work(bool headless);  // the interactive loop's sleep (Note [Idle while listening])
  void update_advice();  // after a load: (re)starts the advisor over the loaded traces
  void poll_advice();
  void start_live_waker();
  void stop_live_waker();
  int run_bench();
  int headless_exit_code(int rc) const;  // Note [Headless exit codes] in app_run.cpp

  AppOptions opt_;
  AppState st_;
  GLFWwindow* window_ = nullptr;
  bool imgui_ready_ = false;
  std::unique_ptr<BackgroundLoad> load_;
  std::vector<std::string> opened_paths_;  // every path loaded or loading (advice: which are traces)
  std::set<std::pair<std::string, std::uint32_t>> ranks_told_;  // shown under another id, said (shown_elsewhere)
  std::unique_ptr<AdviceJob> advice_job_;
  std::vector<ScriptCommand> script_;
  std::size_t script_pos_ = 0;
  int script_hold_ = 0;                 // frames left in the current command
  int held_key_ = -1;
  bool mouse_down_[2] = {false, false};
  float mouse_x_ = -1, mouse_y_ = -1;
  double wait_deadline_ = 0;
  std::uint64_t load_errors_ = 0;
  std::uint64_t script_failures_ = 0;
  bool panes_set_ = false;              // the first load with data chose the default panes
  bool steps_hidden_ = false;           // ... and hid the step table for a snapshot (shown again with steps)
  std::uint64_t frames_ = 0;
  double synth_s_ = 0;                  // time to generate + index --synthetic data
  bool live_pending_ = false;           // live: arrivals taken but not yet published (rate limit)
  bool summary_stale_ = false;          // live: the last publish skipped the 1 Hz summary refresh
  double summary_s_ = -1e9;             // live: when the summary was last recomputed (1 Hz)
  bool allocations_stale_ = false;      // live: block events published since the lifetimes were rebuilt
  double allocations_due_s_ = 0;        // live: the next rebuild of the lifetimes may run from then
  // See Note [Idle while listening]: wakes the sleeping UI thread when the receiver has news.
  std::thread live_waker_;
  std::mutex waker_mu_;
  std::condition_variable waker_cv_;
  bool waker_stop_ = false;             // guarded by waker_mu_
  std::atomic<std::uint64_t> live_wakes_{0};
  bool live_published_ = false;         // st_.tl is the live model (appended in place)
  std::unique_ptr<LiveSession> live_;   // Note [Live rebuild] in live.hpp
  std::vector<std::string> pending_drops_;
  int redraw_frames_ = 3;               // frames still to draw after the last input (ImGui settles)
  void range_prompt();
  bool open_popup_ = false;
  std::vector<std::string> range_paths_;  // waiting for the range prompt's answer
  float range_lo_s_ = 0, range_hi_s_ = 10;
  char open_path_[512] = {};
  friend void drop_callback(GLFWwindow*, int, const char**);
};

}  // namespace memcomm::view
