// StreamReceiver: see stream_receiver.hpp and Note [Live protocol].
#include "memcomm/profiler/stream_receiver.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "socket_util.hpp"

namespace memcomm::prof {

struct StreamReceiver::Connection {
  int fd = -1;
  int id = 0;
  std::thread thread;
  std::atomic<bool> done{false};
};

StreamReceiver::StreamReceiver(const ReceiverOptions& options) : opt_(options) {}

StreamReceiver::~StreamReceiver() { stop(); }

void StreamReceiver::start() {
  if (listen_fd_ >= 0) return;
  std::string err;
  listen_fd_ = net::listen_on(opt_.endpoint, err, port_);
  if (listen_fd_ < 0) throw TraceError(err);
  if (!opt_.quiet && !is_loopback_host(opt_.endpoint.host))
    fmt::print(stderr, "memcomm live: listening on non-loopback address {}:{} as asked\n", opt_.endpoint.host, port_);
  stop_ = false;
  accept_thread_ = std::thread([this] { accept_loop(); });
}

void StreamReceiver::stop() {
  stop_ = true;
  if (accept_thread_.joinable()) accept_thread_.join();
  net::close_fd(listen_fd_);
  std::vector<std::shared_ptr<Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    conns.swap(conns_);
  }
  // Each connection thread polls with a short timeout and sees stop_; it closes its own socket.
  for (auto& c : conns)
    if (c->thread.joinable()) c->thread.join();
}

void StreamReceiver::push(LiveMessage m) {
  std::lock_guard<std::mutex> lock(mu_);
  if (m.type == LiveMessage::Type::Data) {
    if (queued_events_ + m.events.size() > opt_.max_queued_events) {
      stats_.dropped += m.events.size();
      m.events.clear();
      if (m.strings.empty()) return;  // strings are never dropped: later events need them
    }
    queued_events_ += m.events.size();
    stats_.events += m.events.size();
  }
  queue_.push_back(std::move(m));
}

size_t StreamReceiver::poll(std::vector<LiveMessage>& out) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = queue_.size();
  for (auto& m : queue_) out.push_back(std::move(m));
  queue_.clear();
  queued_events_ = 0;
  return n;
}

ReceiverStats StreamReceiver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void StreamReceiver::accept_loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto c = std::make_shared<Connection>();
    c->fd = fd;
    {
      std::lock_guard<std::mutex> lock(mu_);
      c->id = next_id_++;
    }
    std::lock_guard<std::mutex> lock(conns_mu_);
    // Reap finished connections so a long session does not accumulate threads.
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done) {
        if ((*it)->thread.joinable()) (*it)->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    c->thread = std::thread([this, c] { serve(c); });
    conns_.push_back(c);
  }
}

namespace {
// Decoder output that turns hellos and frames into LiveMessages.
struct Collect : StreamDecoder::Output {
  int fd;
  uint32_t max_frame;
  LiveMessage who;            // identity from the hello, copied into every message
  std::vector<LiveMessage> out;
  bool ended = false;         // the end-of-stream marker arrived
  bool on_hello(const StreamHello& h, std::string& why) override {
    StreamHelloAck ack{};
    std::memcpy(ack.magic, kStreamMagic, sizeof ack.magic);
    ack.protocol_version = kStreamProtocolVersion;
    ack.event_version = kEventModelVersion;
    ack.max_frame_bytes = max_frame;
    bool ok = true;
    if (h.protocol_version != kStreamProtocolVersion || h.event_version != kEventModelVersion) {
      why = fmt::format("rank {} on {} speaks live protocol v{} / events v{}, this viewer v{} / v{}: "
                        "use matching memcomm versions",
                        h.rank == kUnknownRank ? -1 : int64_t(h.rank), h.host, h.protocol_version, h.event_version,
                        kStreamProtocolVersion, kEventModelVersion);
      ack.status = HelloStatus::VersionMismatch;
      std::snprintf(ack.message, sizeof ack.message, "version mismatch: viewer speaks protocol v%u / events v%u",
                    unsigned(kStreamProtocolVersion), unsigned(kEventModelVersion));
      ok = false;
    }
    std::string err;
    net::set_send_timeout(fd, 2000);
    net::send_all(fd, &ack, sizeof ack, err);
    if (!ok) return false;
    who.rank = h.rank;
    who.world_size = h.world_size;
    who.host = h.host;
    who.pid = h.pid;
    LiveMessage m = who;
    m.type = LiveMessage::Type::Connected;
    m.events_before = h.events_before;
    m.stream_id = h.stream_id;
    out.push_back(std::move(m));
    return true;
  }
  void on_frame(const std::vector<StringDef>& defs, const Event* ev, size_t n) override {
    if (n > 0 && is_stream_end_marker(ev[n - 1])) {  // Note [The end of a stream]
      ended = true;
      --n;
      if (n == 0 && defs.empty()) return;
    }
    LiveMessage m = who;
    m.type = LiveMessage::Type::Data;
    for (const StringDef& d : defs) m.strings.emplace_back(d.id, std::string(d.text));
    m.events.assign(ev, ev + n);
    out.push_back(std::move(m));
  }
};
}  // namespace

void StreamReceiver::serve(std::shared_ptr<Connection> c) {
  StreamDecoder dec(opt_.max_frame_bytes);
  Collect col;
  col.fd = c->fd;
  col.max_frame = opt_.max_frame_bytes;
  col.who.connection = c->id;
  std::vector<unsigned char> buf(1 << 16);
  std::string reason;
  bool protocol_error = false;
  while (!stop_) {
    pollfd p{c->fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, 100);
    if (rc == 0) continue;
    if (rc < 0 && errno == EINTR) continue;
    const ssize_t r = rc < 0 ? -1 : ::recv(c->fd, buf.data(), buf.size(), 0);
    if (r <= 0) {
      if (r < 0) reason = fmt::format("connection lost: {}", std::strerror(errno));
      else if (col.ended) reason = "the rank ended its stream";
      else reason = "connection closed by the rank before its stream's end (killed, or it crashed)";
      break;
    }
    const bool ok = dec.feed(buf.data(), size_t(r), col);
    for (auto& m : col.out) {
      if (m.type == LiveMessage::Type::Connected) {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.connections++;
        stats_.active++;
      }
      push(std::move(m));
    }
    col.out.clear();
    if (!ok) {
      reason = dec.error();
      protocol_error = true;
      break;
    }
  }
  if (stop_ && reason.empty()) reason = "viewer stopped listening";
  const bool was_connected = dec.hello_done();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (was_connected) stats_.active--;
    if (protocol_error) stats_.errors++;
  }
  if (protocol_error) {
    if (!opt_.quiet) fmt::print(stderr, "memcomm live: dropped connection {}: {}\n", c->id, reason);
    LiveMessage m = col.who;
    m.type = LiveMessage::Type::Error;
    m.text = reason;
    push(std::move(m));
  }
  if (was_connected) {
    LiveMessage m = col.who;
    m.type = LiveMessage::Type::Disconnected;
    m.text = reason;
    m.ended = col.ended;
    push(std::move(m));
  }
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
  c->fd = -1;
  c->done = true;
}

}  // namespace memcomm::prof
