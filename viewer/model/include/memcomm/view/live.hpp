// Live mode: events streamed by running ranks (memcomm-train --live HOST:PORT) through the
// profiler's StreamReceiver, kept per rank and published as a Timeline.
//
// Note [Live rebuild]: the model's arrays are sorted and indexed (rows, LOD levels, checkpoints),
// so new events are published by rebuilding the Timeline from all events received so far, at most
// every `min_rebuild_s` (default 0.1 s: with the 20 Hz redraw this keeps event-to-pixels well under
// 250 ms). A rebuild is O(events received); appending to the indexes in place is the next step for
// runs that stream millions of events. bench/viewer/bench_live_latency measures event-to-pixels:
// p95 ~190 ms with 0.5 M events received, ~290 ms with 2 M (2 shared cores, llvmpipe).
#pragma once

#include <memcomm/view/timeline.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
  // All events received so far, as a Timeline; ranks that disconnected are kept, marked.
  Timeline build();
  LiveStats stats() const;
  std::uint64_t events_received() const { return events_; }

 private:
  struct RankStream;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint64_t events_ = 0;
  bool dirty_ = false;
  double last_build_s_ = 0;
  double min_rebuild_s_ = 0.1;
};

}  // namespace memcomm::view
