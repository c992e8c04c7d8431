// StreamReceiver: the viewer side of the live stream (Note [Live protocol]). Listens, accepts any
// number of ranks, validates every byte through a ConnectionDecoder per connection, and queues what
// arrived for the UI thread to poll(). A misbehaving connection (garbage, oversize frame, version
// mismatch) is closed with a message; the receiver keeps serving the others. A rank that disconnects is
// reported (Disconnected), so the viewer can mark it rather than forget it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcomm/profiler/stream_connection.hpp"
#include "memcomm/profiler/stream_protocol.hpp"

namespace memcomm::prof {

struct ReceiverOptions {
  Endpoint endpoint{"127.0.0.1", kDefaultLivePort};  // port 0 picks a free port (see port())
  uint32_t max_frame_bytes = 16u << 20;               // larger frames are refused
  size_t max_queued_events = 64u << 20;               // beyond this (UI not polling), drop and count
  bool quiet = false;                                 // no messages on stderr
};

struct ReceiverStats {
  uint64_t connections = 0;        // accepted handshakes, ever
  uint64_t active = 0;             // connected now
  uint64_t events = 0;             // received
  uint64_t dropped = 0;            // queue overflow (UI not polling)
  uint64_t errors = 0;             // connections closed for protocol errors
};

class StreamReceiver {
 public:
  explicit StreamReceiver(const ReceiverOptions& options = {});
  ~StreamReceiver();  // stop()
  StreamReceiver(const StreamReceiver&) = delete;
  StreamReceiver& operator=(const StreamReceiver&) = delete;

  // Binds and starts accepting. Throws TraceError (e.g. "cannot listen on 127.0.0.1:7433: Address
  // already in use").
  void start();
  void stop();
  uint16_t port() const { return port_; }

  // Moves everything received since the last call into `out` (appending). Returns the count.
  size_t poll(std::vector<LiveMessage>& out);
  ReceiverStats stats() const;

 private:
  struct Connection;
  void accept_loop();
  void serve(std::shared_ptr<Connection> c);
  void deliver(std::vector<LiveMessage>& messages);  // pushes each, counting connections
  void push(LiveMessage m);

  ReceiverOptions opt_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex conns_mu_;
  std::vector<std::shared_ptr<Connection>> conns_;
  mutable std::mutex mu_;
  std::vector<LiveMessage> queue_;
  size_t queued_events_ = 0;
  ReceiverStats stats_;
  int next_id_ = 1;
};

}  // namespace memcomm::prof
