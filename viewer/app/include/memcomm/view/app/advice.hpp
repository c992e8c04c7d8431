// The Summary pane's advice (issue 6, view 5: "the analysis library's numbers, and the tuner's
// results when the trace holds them"): the profiler's analysis and advisor over the loaded .mct
// and torch.profiler traces, and the tuner's probes from the trace's tune.* counters.
//
// Note [Advice in a child process]
// The advisor (advisor/) re-reads the traces and replays their allocations through the allocator
// policies. The viewer could link it (the engine no longer pulls in libcudart: Note [Sources by
// name]), but it runs the tool that already wraps it, `memcomm-trace advise --json FILES` (and
// `memcomm-trace report` for the analysis tables), in a background thread, and shows what it
// prints. The advice is then exactly what the command line gives, the traces are read in a process
// of their own (the viewer's memory budget of <= 40 B/event is not spent on a second copy of the
// events, nor on the replay's request lists), a slow advisor is bounded by a time limit the viewer
// can enforce by killing it, and a failure there is a message in the pane, not a crash of the viewer. The tool is
// found next to memcomm-view (both install to bin/), else on PATH; without it the pane says so.
// Live streams have no files: the pane says to run memcomm-trace advise on the run's traces.
#pragma once

#include <memcomm/view/timeline.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace memcomm::view {

// One piece of the advisor's advice (memcomm::advise::Advice as `memcomm-trace advise --json` prints it).
struct AdviceItem {
  std::string topic;        // fragmentation, communication, data, headroom, straggler
  std::string change;       // what to do
  std::string evidence;     // the numbers behind it
  double saving = 0;        // expected saving, in saving_unit
  std::string saving_unit;  // "bytes", "ms/step" or "calls"
  std::string saving_text;  // the saving as memcomm-trace advise says it (advise::saving_text)
};

// What the Summary pane shows of the advisor, and the state of the job that computes it.
struct AdviceResult {
  enum class State {
    None,        // nothing loaded from files (or nothing asked yet)
    NoTraces,    // data loaded, but no trace or snapshot among it (synthetic data)
    Live,        // live streams: no files to advise on
    Waiting,     // traces too large to run automatically: the pane offers a button
    Running,
    Done,
    Failed,      // the tool is missing or failed: `error` says why
  };
  State state = State::None;
  std::vector<std::string> files;     // the traces (.mct, torch.profiler) and snapshots advised on
  std::vector<AdviceItem> advice;     // Done: the advice (empty: no rule's threshold is crossed)
  std::string report;                 // Done: `memcomm-trace report` text (analysis tables)
  std::string error;                  // Failed: why
  std::string tool;                   // the memcomm-trace run
  double seconds = 0;                 // how long the tool took
};
const char* advice_state_name(AdviceResult::State s);

// The files among `paths` that memcomm-trace advise reads (memcomm and torch.profiler traces, PyTorch
// snapshots: by their content) and loaded (named at the start
// of one of `sources`, the loaded Timeline's sources), in order, without repeats.
std::vector<std::string> loaded_trace_files(const std::vector<std::string>& paths, const std::vector<std::string>& sources);
// `configured` when not empty, else memcomm-trace next to this executable, else on PATH; "" when none.
std::string find_trace_tool(const std::string& configured);
// Parses `memcomm-trace advise --json`; false with a message on malformed input.
bool parse_advice_json(const std::string& text, std::vector<AdviceItem>& out, std::string& error);

// Runs memcomm-trace report and advise over `files` in a background thread (Note [Advice in a
// child process]). Destroying the job kills a tool still running and joins the thread. The job
// has a time limit: a tool still running `timeout_s` after the start gets SIGKILL, and the job
// fails with "memcomm-trace advise timed out ...".
class AdviceJob {
 public:
  static constexpr double kDefaultTimeoutS = 60;
  // on_done runs on the job's thread when it finishes (the app wakes its window with it).
  AdviceJob(std::string tool, std::vector<std::string> files, std::function<void()> on_done = {},
            double timeout_s = kDefaultTimeoutS);
  ~AdviceJob();
  AdviceJob(const AdviceJob&) = delete;
  AdviceJob& operator=(const AdviceJob&) = delete;
  bool done() const { return done_.load(); }
  AdviceResult take();  // after done()

 private:
  void work();
  std::string tool_;
  std::vector<std::string> files_;
  std::function<void()> on_done_;
  double timeout_s_;  // for both children together
  AdviceResult result_;
  std::atomic<bool> done_{false}, cancel_{false};
  std::mutex child_mu_;
  pid_t child_ = 0;  // the tool while it runs, under child_mu_ (run_child in advice.cpp)
  std::thread thread_;
};

// One probe of memcomm-tune, from the tune.* counters its --trace records (tuner/src/probe.cpp):
// tune.micro_batch and tune.oom per probe, then tune.peak_reserved and tune.step_ms when it fit.
struct TuneProbe {
  TimeNs t = 0;             // when the probe was recorded
  double micro_batch = 0;
  bool oom = false;
  double peak_reserved = -1;  // bytes; < 0 when not recorded (OOM)
  double step_ms = -1;        // < 0 when not recorded (OOM)
};
// The probes of the first rank (by rank id) that recorded tune.micro_batch; `rank` gets that rank.
// Empty when the trace holds no tuner counters. O(probes): a handful of samples.
std::vector<TuneProbe> tune_probes(const Timeline& tl, std::uint32_t& rank);

}  // namespace memcomm::view
