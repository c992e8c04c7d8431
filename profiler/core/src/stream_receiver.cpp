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

void StreamReceiver::serve(std::shared_ptr<Connection> c) {
  ConnectionDecoder dec(c->id, opt_.max_frame_bytes, [fd = c->fd](const StreamHelloAck& ack) {
    std::string err;
    net::set_send_timeout(fd, 2000);
    net::send_all(fd, &ack, sizeof ack, err);  // a rank gone already is seen at the next recv()
  });
  std::vector<unsigned char> buf(1 << 16);
  std::vector<LiveMessage> out;
  std::string reason;
  while (!stop_) {
    pollfd p{c->fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, 100);
    if (rc == 0) continue;
    if (rc < 0 && errno == EINTR) continue;
    const ssize_t r = rc < 0 ? -1 : ::recv(c->fd, buf.data(), buf.size(), 0);
    if (r <= 0) {
      reason = r < 0 ? fmt::format("connection lost: {}", std::strerror(errno)) : dec.reason_at_eof();
      break;
    }
    const bool ok = dec.feed(buf.data(), size_t(r), out);
    deliver(out);
    if (!ok) break;
  }
  if (dec.failed()) {
    reason = dec.error();
    if (!opt_.quiet) fmt::print(stderr, "memcomm live: dropped connection {}: {}\n", c->id, reason);
  } else if (stop_ && reason.empty()) {
    reason = "viewer stopped listening";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dec.hello_done()) stats_.active--;
    if (dec.failed()) stats_.errors++;
  }
  dec.close(reason, out);
  deliver(out);
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
  c->fd = -1;
  c->done = true;
}

void StreamReceiver::deliver(std::vector<LiveMessage>& messages) {
  for (auto& m : messages) {
    if (m.type == LiveMessage::Type::Connected) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.connections++;
      stats_.active++;
    }
    push(std::move(m));
  }
  messages.clear();
}

}  // namespace memcomm::prof
