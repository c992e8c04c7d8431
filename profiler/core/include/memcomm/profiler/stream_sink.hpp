// StreamSink: the rank side of the live stream (Note [Live protocol]). A Sink whose consume()
// only copies into a bounded queue; a sender thread connects, handshakes, encodes frames and
// sends. A missing, slow or killed viewer never slows the recorder: the queue overflows, drops are
// counted (and sent in-band once the viewer drains), and the thread reconnects with backoff.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "memcomm/profiler/sink.hpp"
#include "memcomm/profiler/stream_protocol.hpp"

namespace memcomm::prof {

struct StreamOptions {
  Endpoint endpoint;                         // where the viewer listens (parse_endpoint)
  uint32_t rank = kUnknownRank;
  uint32_t world_size = 0;
  size_t max_queued_events = 1u << 20;       // bound of the queue (24 MiB); beyond it, drops
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  int connect_timeout_ms = 1000;
  int send_timeout_ms = 2000;                // a viewer that stalls a send this long is dropped
  int reconnect_min_ms = 100;                // backoff doubles up to reconnect_max_ms
  int reconnect_max_ms = 2000;
  bool quiet = false;                        // no messages on stderr
  uint64_t stream_id = 0;                    // the hello's stream_id (0: one drawn at random)
};

struct StreamStats {
  uint64_t sent_events = 0;
  uint64_t dropped_events = 0;   // never sent: queue overflow (viewer absent or slow), in flight when it
                                 // went away, or still queued at close
  uint64_t queued_events = 0;    // waiting to be sent now
  uint64_t frames = 0;
  uint64_t connects = 0;         // successful handshakes
  bool connected = false;
  bool version_mismatch = false; // the viewer refused our version: no more retries
  std::string last_error;
};

class StreamSink : public Sink {
 public:
  explicit StreamSink(const StreamOptions& options);
  ~StreamSink() override;
  void consume(const Batch& batch) override;
  void flush() override {}
  // Sends what is queued if connected (up to `linger_ms`) and, when all of it went, the end-of-stream
  // marker (Note [The end of a stream]); then disconnects and stops the thread. The destructor closes
  // with no linger: what is queued is dropped and the stream ends without its marker.
  void close() override;
  void close(int linger_ms);
  StreamStats stats() const;

 private:
  void run();
  bool connect_and_handshake(int& fd);
  bool send_pending(int fd);
  void send_end(int fd);  // the end-of-stream marker (Note [The end of a stream])

  StreamOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<StringId, std::string>> all_strings_;  // resent after every connect
  size_t strings_sent_ = 0;                                    // of all_strings_, on this connection
  std::deque<std::vector<Event>> queue_;
  size_t queued_events_ = 0;
  uint64_t dropped_total_ = 0, dropped_reported_ = 0;
  bool stop_ = false;
  int linger_ms_ = 0;
  StreamStats stats_;
  std::thread thread_;
};

}  // namespace memcomm::prof
