// App: live streams (--listen) and the idle policy of the interactive loop: no redraw while
// nothing changes, listening included (Note [Idle while listening]).
#include <memcomm/view/app/app.hpp>

#include "clock.hpp"

#define GLFW_INCLUDE_NONE
#include <GLFW/glfw3.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>

namespace memcomm::view {

bool App::start_live(std::string& error) {
  live_ = std::make_unique<LiveSession>();
  if (!live_->start(opt_.listen, error)) {
    live_.reset();
    return false;
  }
  st_.live_status = "live " + opt_.listen;
  start_live_waker();
  return true;
}

void App::poll_live() {
  if (!live_) return;
  std::vector<std::string> msgs;
  const std::uint64_t events_before = live_->events_received();
  const bool rebuild = live_->poll(msgs, now_s());
  for (const auto& m : msgs) st_.message(m);
  // Something arrived but poll() held the publish back (at most one per 50 ms): stay awake until
  // it is published (Note [Idle while listening]).
  if (!msgs.empty() || live_->events_received() != events_before) live_pending_ = true;
  if (rebuild) {
    const double c0 = thread_cpu_s();
    // Follow the run while the whole of it is in view; keep the user's zoom otherwise.
    if (!live_published_) {  // the first publish replaces what files showed (the live model is its own)
      live_published_ = true;
      if (!st_.tl.empty() || !st_.tl.sources.empty()) {
        st_.message(fmt::format("live: the first stream replaces the files shown ({}): the live view is not merged "
                                "with files; open them in a second viewer", fmt::join(st_.tl.sources, ", ")));
        st_.set_timeline(Timeline(), false);
      }
      update_advice();  // the Summary says live streams have no files to advise on
    }
    const bool following = st_.tl.empty() || (st_.view_t0 <= st_.tl.begin && st_.view_t1 >= st_.tl.end);
    const double now = now_s();
    const bool refresh_summary = now - summary_s_ >= 1.0;
    if (refresh_summary) summary_s_ = now;
    st_.appended(live_->publish(st_.tl), refresh_summary);
    summary_stale_ = !refresh_summary;
    live_pending_ = false;
    if (following) {
      st_.zoom_to(st_.tl.begin, st_.tl.end);
      st_.alloc_time = st_.tl.end;
    }
    st_.publish_cpu_ms = (thread_cpu_s() - c0) * 1e3;
    redraw_frames_ = std::max(redraw_frames_, 2);
    allocations_stale_ = true;
  } else if (summary_stale_ && now_s() - summary_s_ >= 1.0) {
    // The last arrivals came within a second of the previous refresh: refresh once they stop,
    // so that an idle viewer shows the final summary.
    summary_s_ = now_s();
    st_.summary = summarize(st_.tl);
    summary_stale_ = false;
    redraw_frames_ = std::max(redraw_frames_, 2);
  }
  refresh_live_allocations();
  const LiveStats ls = live_->stats();
  st_.live_status = fmt::format("live :{} connections {} active {} received {} queue drops {} errors {}", ls.port,
                                ls.connections, ls.active, ls.events, ls.dropped, ls.errors);
}

// Note [Live allocations]
// The allocations pane and "who holds memory" read each rank's lifetimes (prof::Allocations) and
// their index, which pair every alloc with its free and sort the result: rebuilding them is
// O(the rank's block events), where a publish is O(new events) (Note [Live rebuild]). Live mode
// once left them out, and the pane stayed empty for the whole run. They are rebuilt after a
// publish brought block events, at most once a second and no sooner than 20 times the last
// rebuild's duration after it, so the rebuilds take at most 1/20 of the UI thread however long the
// run gets (a rebuild of 50 ms waits a second, one of 0.2 s four); the pane lags the other panes
// by that much. The viewer stays awake until the last arrivals are rebuilt, so a run that ended
// or paused shows all of its allocations.
void App::refresh_live_allocations() {
  if (!allocations_stale_ || now_s() < allocations_due_s_) return;
  const double t0 = now_s(), c0 = thread_cpu_s();
  if (live_->refresh_allocations(st_.tl)) {
    st_.allocations_rebuilt();
    st_.allocations_cpu_ms = (thread_cpu_s() - c0) * 1e3;
    ++st_.allocations_rebuilds;
    redraw_frames_ = std::max(redraw_frames_, 2);
  }
  const double t1 = now_s();
  allocations_stale_ = false;
  allocations_due_s_ = t1 + std::max(1.0, 20.0 * (t1 - t0));
}

// Note [Idle while listening]
// The viewer draws nothing while nothing changes (issue 6: "no redraw when nothing changes"), and a
// listening viewer with no rank sending is such a case: it used to redraw at 20 Hz all the while
// (166-216 CPU ticks in 8 s with nothing connected; now 2). The UI thread sleeps in glfwWaitEvents; this
// waker thread wakes it with glfwPostEmptyEvent (callable from any thread) when the receiver's
// counters move: a connection, a disconnection, events, a protocol error or a queue drop. It polls
// those counters at 50 Hz (LiveSession::stats() only reads the receiver's mutex-guarded stats, so it
// is safe beside the UI thread's poll()), which costs microseconds per check, and adds at most 20 ms
// to event-to-pixels (target 250 ms). A blocking wake-up would need a callback in
// prof::StreamReceiver. Once woken, the UI stays awake (20 Hz) only while arrivals wait for their
// rate-limited publish (live_pending_), and once more when the 1 Hz summary refresh was skipped
// (summary_stale_) or the allocations wait for their rebuild (allocations_stale_, Note [Live
// allocations]).
void App::start_live_waker() {
  if (!live_ || live_waker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(waker_mu_);
    waker_stop_ = false;
  }
  live_waker_ = std::thread([this] {
    const auto key = [](const LiveStats& s) {
      return std::array<std::uint64_t, 5>{s.connections, s.active, s.events, s.dropped, s.errors};
    };
    auto last = key(live_->stats());
    std::unique_lock<std::mutex> lock(waker_mu_);
    while (!waker_cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return waker_stop_; })) {
      const auto now = key(live_->stats());
      if (now == last) continue;
      last = now;
      live_wakes_.fetch_add(1);
      glfwPostEmptyEvent();
    }
  });
}

void App::stop_live_waker() {
  if (!live_waker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(waker_mu_);
    waker_stop_ = true;
  }
  waker_cv_.notify_all();
  live_waker_.join();
}

std::uint16_t App::live_port() const {
  if (live_) return live_->stats().port;
  return 0;
}

bool App::idle() const {
  return redraw_frames_ <= 0 && !load_ && script_.empty() && pending_drops_.empty() && !live_pending_ && !summary_stale_ &&
         !allocations_stale_;
}

void App::wait_for_work(bool headless) {
  // Headless frames run flat out (a screenshot's frame count, --bench, a script) except where only a
  // live arrival can end the run: a viewer waiting out --exit-after-events sleeps as a window does
  // (it spun at 90% of a core, starving the ranks it listened to), waking for --timeout's check.
  const bool awaits_arrivals = live_ && opt_.exit_after_events > 0 && script_done();
  if (headless && !awaits_arrivals) {
    glfwPollEvents();
  } else if (idle()) {
    // Nothing changes: sleep until input, a dropped file or a live arrival. Headless has no input to
    // answer with redraws, and wakes four times a second to check --timeout.
    if (headless) {
      glfwWaitEventsTimeout(0.25);
    } else {
      glfwWaitEvents();
      redraw_frames_ = 3;
    }
  } else if (redraw_frames_ <= 0) {
    // Loading, or live arrivals waiting for their publish: progress at 20 Hz, no busy loop. A stale
    // summary or stale allocations alone wait until their refresh is due.
    double wait = 0.05;
    if (!load_ && !live_pending_ && pending_drops_.empty() && script_.empty()) {
      double due = 1e300;
      if (summary_stale_) due = summary_s_ + 1.0;
      if (allocations_stale_) due = std::min(due, allocations_due_s_);
      wait = std::max(0.001, due - now_s());
    }
    glfwWaitEventsTimeout(wait);
  } else {
    glfwPollEvents();
  }
}

}  // namespace memcomm::view
