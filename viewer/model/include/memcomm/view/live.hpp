// Live mode: events streamed by running ranks (memcomm-train --live HOST:PORT) through the
// profiler's StreamReceiver, kept per rank and published as a Timeline.
//
// Note [Live rebuild]: arriving events go straight into a TimelineBuilder's arrays, and publish()
// appends them to the shown Timeline in place (Note [Incremental append] in timeline_append.cpp),
// at most every `min_rebuild_s` (0.05 s: each frame of the 20 Hz live redraw). A publish costs O(events
// since the last one), not O(events received): event-to-pixels does not grow with the run. That
// includes the model's arrays growing: they grow by chunks (Note [Chunked arrays] in chunked.hpp),
// so no publish copies what earlier ones published.
// bench/viewer/bench_live_latency measures it for the first and the last tenth of a run.
#pragma once

#include <memcomm/view/builder.hpp>
#include <memcomm/view/timeline.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace memcomm::prof {
struct LiveMessage;
}

namespace memcomm::view {

struct LiveStats {
  std::uint64_t connections = 0, active = 0, events = 0, dropped = 0, errors = 0;
  std::uint16_t port = 0;
};

class LiveSession {
 public:
  LiveSession();
  ~LiveSession();
  LiveSession(const LiveSession&) = delete;
  LiveSession& operator=(const LiveSession&) = delete;

  // Listens on HOST:PORT (port 0: any free port). False with a message when it cannot.
  bool start(const std::string& endpoint, std::string& error);
  // Takes what arrived. Messages (connects, disconnects, protocol errors) are appended to
  // `messages`. Returns true when the published Timeline should be rebuilt now.
  bool poll(std::vector<std::string>& messages, double now_s);
  // What poll() does with the messages it took, for messages that come from elsewhere (tests, the
  // live fuzz target: bytes through prof::ConnectionDecoder). Moves out of `in`.
  bool take(std::vector<prof::LiveMessage>& in, std::vector<std::string>& messages, double now_s);
  // Appends what arrived since the last publish to `tl`, which only this session's publish() has
  // written to; ranks that disconnected are kept, marked.
  AppendResult publish(Timeline& tl);
  // The allocation lifetimes are no part of publish(): each rebuild is O(the rank's block events),
  // not O(new ones), so the caller paces this call (See Note [Live allocations] in
  // viewer/app/app_live.cpp). True if any changed.
  bool refresh_allocations(Timeline& tl);
  LiveStats stats() const;
  std::uint64_t events_received() const { return events_; }

 private:
  struct RankStream;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint64_t events_ = 0;
  bool dirty_ = false;
  double last_build_s_ = 0;
  double min_rebuild_s_ = 0.05;  // a publish is O(new events): every 20 Hz frame can take one
};

}  // namespace memcomm::view
