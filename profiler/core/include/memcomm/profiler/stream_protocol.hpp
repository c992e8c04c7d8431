// The live stream protocol: a rank (StreamSink) connects out to a listening viewer
// (StreamReceiver) and sends its events as they are recorded.
//
// Note [Live protocol]
//   rank -> viewer  StreamHello (128 bytes): magic, protocol and event-model versions, who I am
//   viewer -> rank  StreamHelloAck (128 bytes): accepted, or refused with a message (version
//                   mismatch: both sides print who speaks which version, the rank stops retrying)
//   rank -> viewer  frames, each exactly a .mct chunk (ChunkHeader + payload, lz4, checksummed;
//                   Note [mct layout]) with raw size <= the viewer's max_frame_bytes. The first
//                   frame after every (re)connect redefines all strings, so a viewer that
//                   restarts gets a consistent table.
// Anything else on the socket (bad magic, oversize or corrupt frame) makes the viewer drop that
// connection with a message; the viewer itself keeps running. A rank whose queue overflows (slow or
// absent viewer) drops events and reports them in-band as DropEvents with thread = kStreamDropThread.
// A sender that closes its stream on purpose sends one last frame ending in the end-of-stream marker
// (Note [The end of a stream]).
//
// Note [The end of a stream]:
// A viewer told "connection closed by the rank" alike for a run that finished and for a rank that
// was killed: a closed socket says nothing of why. A sender that closes on purpose (the recording
// ended, the run finished or was stopped with its traces flushed) sends, after its last events, a
// frame whose last event is a DropEvent with thread = kStreamEndThread and count 0. The receiver
// takes it out of the data and reports the end as the rank's; a socket closed without it is a
// stream cut short (SIGKILL, a crash, the network). Carried as a DropEvent of count 0, the marker
// needs no new event kind or protocol version: a viewer from before it counts 0 drops and reads
// the close as before. It is no recorded event: not counted as sent or received.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memcomm/trace/chunk_codec.hpp"

namespace memcomm::prof {

inline constexpr char kStreamMagic[8] = {'M', 'C', 'L', 'I', 'V', 'E', '\0', '\x01'};
inline constexpr uint16_t kStreamProtocolVersion = 1;
inline constexpr uint16_t kDefaultLivePort = 7433;
inline constexpr uint32_t kDefaultMaxFrameBytes = 4u << 20;
inline constexpr uint16_t kStreamDropThread = 0xFFFF;  // DropEvent::thread for live-queue drops
inline constexpr uint16_t kStreamEndThread = 0xFFFE;   // DropEvent::thread of the end-of-stream marker

// The marker a sender closing on purpose sends last (Note [The end of a stream]).
Event stream_end_marker(int64_t ts);
bool is_stream_end_marker(const Event& e);

enum class HelloStatus : uint16_t { Accepted = 0, VersionMismatch = 1, Refused = 2 };

#pragma pack(push, 1)
struct StreamHello {
  char magic[8];               // kStreamMagic
  uint16_t protocol_version;   // kStreamProtocolVersion
  uint16_t event_version;      // kEventModelVersion
  uint32_t rank;               // kUnknownRank when not distributed
  uint32_t world_size;
  uint32_t pid;
  uint32_t max_frame_bytes;    // the largest frame this sender produces (raw bytes)
  char host[64];               // NUL-terminated host name
  // Events this sender delivered on earlier connections: 0 on its first, so a viewer that has fewer
  // from it knows the stream starts mid-run (the memory curves then come from samples, Note [Memory
  // curves from block events] in allocator_fold.hpp). Senders from before this field send 0 here.
  uint64_t events_before;
  // Nonzero, the same on every connection of one sender: a viewer tells a sender's reconnect from
  // another stream claiming its rank (Note [A stream that reconnects] in viewer/model/live.cpp).
  // Senders from before this field send 0 here.
  uint64_t stream_id;
  uint8_t reserved[20];        // zero
};
struct StreamHelloAck {
  char magic[8];               // kStreamMagic
  uint16_t protocol_version;   // the viewer's version
  uint16_t event_version;
  HelloStatus status;
  uint16_t reserved;
  uint32_t max_frame_bytes;    // the viewer's frame limit
  char message[108];           // NUL-terminated; why it refused
};
#pragma pack(pop)
static_assert(sizeof(StreamHello) == 128);
static_assert(sizeof(StreamHelloAck) == 128);

struct Endpoint {
  std::string host;
  uint16_t port = kDefaultLivePort;
};
// Where to listen: "HOST:PORT", "[v6]:PORT", ":PORT", "PORT" or "HOST". A missing host is 127.0.0.1
// (loopback unless asked otherwise), a missing port kDefaultLivePort. Throws TraceError with a clear
// message on a bad port (a ':' with nothing after it is one, as is a port below `lowest_port`).
Endpoint parse_endpoint(const std::string& text, unsigned lowest_port = 0);
// Where to connect (memcomm-train --live, Python's profile(live=)): "HOST:PORT", "[v6]:PORT" or ":PORT"
// (loopback), with a port from 1 to 65535. The port is required: a sender that guessed the default
// would wait on a viewer listening elsewhere without saying so. Throws TraceError naming what is wrong.
Endpoint parse_connect_endpoint(const std::string& text);
bool is_loopback_host(const std::string& host);

// Incremental decoder of the viewer side of a connection: feed it whatever recv() returned.
// Exposed (and fuzzed) separately from the sockets.
class StreamDecoder {
 public:
  struct Output {
    virtual ~Output() = default;
    // Return false to refuse (the decoder then fails with `why`).
    virtual bool on_hello(const StreamHello& hello, std::string& why) = 0;
    virtual void on_frame(const std::vector<StringDef>& new_strings, const Event* events, size_t n) = 0;
  };
  explicit StreamDecoder(uint32_t max_frame_bytes = kDefaultMaxFrameBytes) : max_frame_(max_frame_bytes) {}

  // False on a protocol error (error() says what and at which stream offset); later calls also
  // return false. The connection must then be closed.
  bool feed(const void* data, size_t n, Output& out);
  const std::string& error() const { return error_; }
  bool hello_done() const { return hello_done_; }
  uint64_t frames() const { return frames_; }
  uint64_t events() const { return events_; }
  const std::vector<std::string>& strings() const { return strings_; }

 private:
  bool fail(const std::string& why);
  uint32_t max_frame_;
  std::vector<unsigned char> buf_;
  size_t consumed_ = 0;          // bytes of buf_ already processed
  uint64_t offset_ = 0;          // stream offset of buf_[0]
  bool hello_done_ = false;
  std::string error_;
  std::vector<std::string> strings_;
  std::vector<StringDef> new_defs_;
  ChunkDecoder dec_;
  uint64_t frames_ = 0, events_ = 0;
};

}  // namespace memcomm::prof
