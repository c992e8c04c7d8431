// One live-stream connection as the viewer reads it (Note [Live protocol]), with no socket: bytes
// in, in pieces of any size, LiveMessages out. The hello is answered through an injected `reply`, so
// StreamReceiver runs one per accepted socket and tests and the live fuzz target run it on bytes of
// their own; whatever the viewer makes of a connection's messages, it met them here first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "memcomm/profiler/stream_protocol.hpp"

namespace memcomm::prof {

struct LiveMessage {
  enum class Type { Connected, Data, Disconnected, Error };
  Type type = Type::Data;
  int connection = 0;              // connection id, unique per receiver
  uint32_t rank = kUnknownRank;    // from the rank's hello
  uint32_t world_size = 0;
  std::string host;                // from the hello
  uint32_t pid = 0;
  uint64_t events_before = 0;      // Connected: events the rank sent on earlier connections
  uint64_t stream_id = 0;          // Connected: the sender's identity across its connections (0: unknown)
  std::vector<std::pair<StringId, std::string>> strings;  // Data: new string definitions
  std::vector<Event> events;       // Data: events in arrival order
  std::string text;                // Disconnected/Error: why
  bool ended = false;              // Disconnected: the rank ended its stream (Note [The end of a stream])
};

class ConnectionDecoder {
 public:
  // Gets the answer to the hello; the connection is refused after it when its status says so.
  using Reply = std::function<void(const StreamHelloAck&)>;
  ConnectionDecoder(int connection, uint32_t max_frame_bytes, Reply reply);

  // Decodes `n` more bytes, appending what they complete to `out`. False on a protocol error (a
  // refused hello too): error() says what, and the connection must be closed.
  bool feed(const void* data, size_t n, std::vector<LiveMessage>& out);

  // The messages that end the connection, appended to `out`: an Error after a protocol error, then
  // Disconnected with `reason` where a hello was accepted (a refused rank never connected).
  void close(const std::string& reason, std::vector<LiveMessage>& out) const;

  // Why the stream ended, for a socket that reached its end (recv() returned 0).
  std::string reason_at_eof() const;

  bool hello_done() const { return decoder_.hello_done(); }
  bool ended() const { return ended_; }  // the end-of-stream marker arrived
  bool failed() const { return failed_; }
  const std::string& error() const { return decoder_.error(); }

 private:
  struct Collect;
  StreamDecoder decoder_;
  LiveMessage who_;  // the identity from the hello, copied into every message
  uint32_t max_frame_;
  Reply reply_;
  bool ended_ = false;
  bool failed_ = false;
};

}  // namespace memcomm::prof
