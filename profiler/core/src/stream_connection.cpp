// ConnectionDecoder: see stream_connection.hpp and Note [Live protocol].
#include "memcomm/profiler/stream_connection.hpp"

#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace memcomm::prof {

// The decoder's output: hellos answered and turned into Connected, frames into Data.
struct ConnectionDecoder::Collect : StreamDecoder::Output {
  ConnectionDecoder& c;
  std::vector<LiveMessage>& out;
  Collect(ConnectionDecoder& conn, std::vector<LiveMessage>& o) : c(conn), out(o) {}

  bool on_hello(const StreamHello& h, std::string& why) override {
    StreamHelloAck ack{};
    std::memcpy(ack.magic, kStreamMagic, sizeof ack.magic);
    ack.protocol_version = kStreamProtocolVersion;
    ack.event_version = kEventModelVersion;
    ack.max_frame_bytes = c.max_frame_;
    const bool ok = h.protocol_version == kStreamProtocolVersion && h.event_version == kEventModelVersion;
    if (!ok) {
      why = fmt::format("rank {} on {} speaks live protocol v{} / events v{}, this viewer v{} / v{}: "
                        "use matching memcomm versions",
                        h.rank == kUnknownRank ? -1 : int64_t(h.rank), h.host, h.protocol_version, h.event_version,
                        kStreamProtocolVersion, kEventModelVersion);
      ack.status = HelloStatus::VersionMismatch;
      std::snprintf(ack.message, sizeof ack.message, "version mismatch: viewer speaks protocol v%u / events v%u",
                    unsigned(kStreamProtocolVersion), unsigned(kEventModelVersion));
    }
    if (c.reply_) c.reply_(ack);
    if (!ok) return false;
    c.who_.rank = h.rank;
    c.who_.world_size = h.world_size;
    c.who_.host = h.host;  // the decoder ends it within its 64 bytes
    c.who_.pid = h.pid;
    LiveMessage m = c.who_;
    m.type = LiveMessage::Type::Connected;
    m.events_before = h.events_before;
    m.stream_id = h.stream_id;
    out.push_back(std::move(m));
    return true;
  }

  void on_frame(const std::vector<StringDef>& defs, const Event* ev, size_t n) override {
    if (n > 0 && is_stream_end_marker(ev[n - 1])) {  // Note [The end of a stream]
      c.ended_ = true;
      --n;
      if (n == 0 && defs.empty()) return;
    }
    LiveMessage m = c.who_;
    m.type = LiveMessage::Type::Data;
    for (const StringDef& d : defs) m.strings.emplace_back(d.id, std::string(d.text));
    m.events.assign(ev, ev + n);
    out.push_back(std::move(m));
  }
};

ConnectionDecoder::ConnectionDecoder(int connection, uint32_t max_frame_bytes, Reply reply)
    : decoder_(max_frame_bytes), max_frame_(max_frame_bytes), reply_(std::move(reply)) {
  who_.connection = connection;
}

bool ConnectionDecoder::feed(const void* data, size_t n, std::vector<LiveMessage>& out) {
  if (failed_) return false;
  Collect collect(*this, out);
  failed_ = !decoder_.feed(data, n, collect);
  return !failed_;
}

void ConnectionDecoder::close(const std::string& reason, std::vector<LiveMessage>& out) const {
  if (failed_) {
    LiveMessage m = who_;
    m.type = LiveMessage::Type::Error;
    m.text = error();
    out.push_back(std::move(m));
  }
  if (hello_done()) {
    LiveMessage m = who_;
    m.type = LiveMessage::Type::Disconnected;
    m.text = reason;
    m.ended = ended_;
    out.push_back(std::move(m));
  }
}

std::string ConnectionDecoder::reason_at_eof() const {
  return ended_ ? "the rank ended its stream"
                : "connection closed by the rank before its stream's end (killed, or it crashed)";
}

}  // namespace memcomm::prof
