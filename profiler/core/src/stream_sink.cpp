// StreamSink: see stream_sink.hpp and Note [Live protocol].
#include "memcomm/profiler/stream_sink.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "memcomm/trace/clock.hpp"
#include "socket_util.hpp"

namespace memcomm::prof {

StreamSink::StreamSink(const StreamOptions& options) : opt_(options) {
  if (opt_.max_frame_bytes < 4096) opt_.max_frame_bytes = 4096;
  while (opt_.stream_id == 0) {  // one identity for all of this sender's connections
    std::random_device entropy;
    opt_.stream_id = (uint64_t(entropy()) << 32) ^ entropy();
  }
  thread_ = std::thread([this] { run(); });
}

StreamSink::~StreamSink() { close(0); }

void StreamSink::consume(const Batch& b) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < b.n_strings; ++i) all_strings_.emplace_back(b.strings[i].id, std::string(b.strings[i].text));
  if (b.n_events) {
    const size_t room = opt_.max_queued_events > queued_events_ ? opt_.max_queued_events - queued_events_ : 0;
    const size_t take = std::min(room, b.n_events);
    if (take) {
      queue_.emplace_back(b.events, b.events + take);
      queued_events_ += take;
    }
    dropped_total_ += b.n_events - take;
    stats_.dropped_events = dropped_total_;
  }
  cv_.notify_one();
}

void StreamSink::close() { close(1000); }

void StreamSink::close(int linger_ms) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    linger_ms_ = linger_ms;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StreamStats StreamSink::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StreamStats s = stats_;
  s.queued_events = queued_events_;
  return s;
}

bool StreamSink::connect_and_handshake(int& fd) {
  std::string err;
  fd = net::connect_to(opt_.endpoint, opt_.connect_timeout_ms, err);
  if (fd < 0) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.last_error = err;
    return false;
  }
  StreamHello h{};
  std::memcpy(h.magic, kStreamMagic, sizeof h.magic);
  h.protocol_version = kStreamProtocolVersion;
  h.event_version = kEventModelVersion;
  h.rank = opt_.rank;
  h.world_size = opt_.world_size;
  h.pid = uint32_t(::getpid());
  h.max_frame_bytes = opt_.max_frame_bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    h.events_before = stats_.sent_events;
  }
  h.stream_id = opt_.stream_id;
  ::gethostname(h.host, sizeof h.host - 1);
  StreamHelloAck ack{};
  net::set_send_timeout(fd, opt_.send_timeout_ms);
  if (!net::send_all(fd, &h, sizeof h, err) || !net::recv_exact(fd, &ack, sizeof ack, 3000, err)) {
    net::close_fd(fd);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.last_error = "handshake with the viewer failed: " + err;
    return false;
  }
  ack.message[sizeof ack.message - 1] = '\0';
  std::lock_guard<std::mutex> lock(mu_);
  if (std::memcmp(ack.magic, kStreamMagic, sizeof ack.magic) != 0) {
    net::close_fd(fd);
    stats_.last_error = fmt::format("{}:{} is not a memcomm viewer (bad handshake reply)", opt_.endpoint.host,
                                    opt_.endpoint.port);
    return false;
  }
  if (ack.status != HelloStatus::Accepted) {
    net::close_fd(fd);
    stats_.version_mismatch = ack.status == HelloStatus::VersionMismatch;
    stats_.last_error = fmt::format("the viewer at {}:{} refused the live stream: {} (viewer: protocol v{}, events v{}; "
                                    "this rank: protocol v{}, events v{})",
                                    opt_.endpoint.host, opt_.endpoint.port, ack.message, ack.protocol_version,
                                    ack.event_version, kStreamProtocolVersion, kEventModelVersion);
    return false;
  }
  if (ack.max_frame_bytes >= 4096 && ack.max_frame_bytes < opt_.max_frame_bytes) opt_.max_frame_bytes = ack.max_frame_bytes;
  stats_.connected = true;
  stats_.connects++;
  stats_.last_error.clear();  // what failed before is no longer why events go missing
  strings_sent_ = 0;
  return true;
}

// Sends the unsent strings and everything queued, as frames no larger than max_frame_bytes.
bool StreamSink::send_pending(int fd) {
  std::vector<std::pair<StringId, std::string>> strings;
  std::deque<std::vector<Event>> batches;
  uint64_t drops = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    strings.assign(all_strings_.begin() + long(strings_sent_), all_strings_.end());
    batches.swap(queue_);
    queued_events_ = 0;
    drops = dropped_total_ - dropped_reported_;
    dropped_reported_ = dropped_total_;
  }
  if (drops) {  // in-band report, first in the frame; not counted as a sent event
    DropEvent d{};
    d.ts = now_ns();
    d.kind = EventKind::Drops;
    d.thread = kStreamDropThread;
    d.count = drops;
    batches.push_front({Event::from(d)});
  }
  if (strings.empty() && batches.empty()) return true;
  ChunkEncoder enc(Codec::Lz4);
  std::vector<char> out;
  std::vector<StringDef> defs;
  std::vector<Event> events;
  for (auto& b : batches) events.insert(events.end(), b.begin(), b.end());
  const size_t budget = opt_.max_frame_bytes - 64;
  size_t si = 0, ei = 0;
  uint64_t frames = 0;
  std::string err;
  while (si < strings.size() || ei < events.size()) {
    defs.clear();
    size_t used = 0;
    while (si < strings.size() && used + 8 + strings[si].second.size() + 8 <= budget) {
      defs.push_back({strings[si].first, strings[si].second});
      used += 8 + strings[si].second.size();
      ++si;
    }
    if (defs.empty() && si < strings.size()) {  // one name longer than a frame: cut it
      strings[si].second.resize(budget / 2);
      continue;
    }
    used = (used + 7) & ~size_t(7);
    const size_t n = std::min(events.size() - ei, (budget - used) / sizeof(Event));
    out.clear();
    enc.encode(defs.data(), defs.size(), events.data() + ei, n, opt_.rank, out);
    if (!net::send_all(fd, out.data(), out.size(), err)) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.last_error = err;
      // In flight when the viewer went away. The in-band drop report at the front, if it never left,
      // is no recorded event: it is not counted as dropped, and its drops are reported again on the
      // next connection (counting it made sent + dropped exceed recorded by one).
      const size_t report_unsent = drops && ei == 0 ? 1 : 0;
      stats_.dropped_events += events.size() - ei - report_unsent;
      dropped_total_ += events.size() - ei - report_unsent;
      if (report_unsent) dropped_reported_ -= drops;
      return false;
    }
    ei += n;
    ++frames;
    {
      std::lock_guard<std::mutex> lock(mu_);
      strings_sent_ += defs.size();
      stats_.sent_events += n - (drops && ei == n && n > 0 ? 1 : 0);
      stats_.frames++;
    }
  }
  return true;
}

// See Note [The end of a stream]: after every event was sent, on a close that lingers.
void StreamSink::send_end(int fd) {
  const Event marker = stream_end_marker(now_ns());
  ChunkEncoder enc(Codec::Lz4);
  std::vector<char> out;
  enc.encode(nullptr, 0, &marker, 1, opt_.rank, out);
  std::string err;
  if (!net::send_all(fd, out.data(), out.size(), err)) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.last_error = err;
  }
}

void StreamSink::run() {
  int fd = -1;
  int backoff = opt_.reconnect_min_ms;
  bool warned = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) break;
      if (stats_.version_mismatch) {  // retrying cannot help; keep counting drops
        cv_.wait(lock, [&] { return stop_; });
        break;
      }
    }
    if (fd < 0) {
      if (!connect_and_handshake(fd)) {
        const StreamStats s = stats();
        if (!opt_.quiet && (!warned || s.version_mismatch))
          fmt::print(stderr, "memcomm live: {}{}\n", s.last_error, s.version_mismatch ? "" : " (will keep retrying)");
        warned = true;
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(backoff), [&] { return stop_; });
        backoff = std::min(backoff * 2, opt_.reconnect_max_ms);
        continue;
      }
      if (!opt_.quiet && warned) fmt::print(stderr, "memcomm live: connected to {}:{}\n", opt_.endpoint.host, opt_.endpoint.port);
      warned = false;
      backoff = opt_.reconnect_min_ms;
    }
    if (!send_pending(fd)) {
      net::close_fd(fd);
      std::lock_guard<std::mutex> lock(mu_);
      stats_.connected = false;
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !queue_.empty(); });
  }
  // Linger: push out what is left (one connection attempt if not connected yet).
  int linger;
  bool pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    linger = linger_ms_;
    pending = !queue_.empty() && !stats_.version_mismatch;
  }
  if (fd < 0 && linger > 0 && pending) connect_and_handshake(fd);
  if (fd >= 0) {
    if (linger > 0) {
      net::set_send_timeout(fd, linger);
      if (send_pending(fd)) send_end(fd);
    }
    net::close_fd(fd);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.connected = false;
  // What is still queued never reaches a viewer: counted with the drops, so sent + dropped is every
  // event the sink was given.
  stats_.dropped_events += queued_events_;
  dropped_total_ += queued_events_;
  queue_.clear();
  queued_events_ = 0;
}

}  // namespace memcomm::prof
