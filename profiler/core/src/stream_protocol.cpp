// Endpoint parsing, the end-of-stream marker and the incremental StreamDecoder (Note [Live protocol]).
#include "memcomm/profiler/stream_protocol.hpp"

#include <arpa/inet.h>

#include <cstring>

#include <fmt/format.h>

namespace memcomm::prof {

Event stream_end_marker(int64_t ts) {
  DropEvent d{};
  d.ts = ts;
  d.kind = EventKind::Drops;
  d.thread = kStreamEndThread;
  d.count = 0;
  return Event::from(d);
}

bool is_stream_end_marker(const Event& e) {
  if (e.kind != EventKind::Drops) return false;
  const DropEvent d = e.as<DropEvent>();
  return d.thread == kStreamEndThread && d.count == 0;
}

Endpoint parse_endpoint(const std::string& text, unsigned lowest_port) {
  Endpoint ep;
  ep.host = "127.0.0.1";
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) throw TraceError(fmt::format("bad address '{}': missing ']'", text));
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw TraceError(fmt::format("bad address '{}': expected ':' after ']'", text));
      port = text.substr(close + 2);
    }
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos) {
      const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      (digits ? port : host) = text;
    } else {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
  }
  if (!host.empty()) ep.host = host;
  if (port.empty() && text.size() > 0 && text.back() == ':')
    throw TraceError(fmt::format("bad address '{}': no port after ':'", text));
  if (!port.empty()) {
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5)
      throw TraceError(fmt::format("bad port '{}' in address '{}' (expected {}-65535)", port, text, lowest_port));
    const unsigned long p = std::stoul(port);
    if (p > 65535 || p < lowest_port)
      throw TraceError(fmt::format("bad port '{}' in address '{}' (expected {}-65535)", port, text, lowest_port));
    ep.port = uint16_t(p);
  }
  return ep;
}

Endpoint parse_connect_endpoint(const std::string& text) {
  const bool bracketed = !text.empty() && text[0] == '[';
  const auto colon = bracketed ? text.find("]:") : text.rfind(':');
  if (colon == std::string::npos)
    throw TraceError(fmt::format("bad address '{}': expected HOST:PORT (the port memcomm-view --listen uses)", text));
  if (!bracketed && text.substr(0, colon).find(':') != std::string::npos)
    throw TraceError(fmt::format("bad address '{}': an IPv6 host goes in brackets, [HOST]:PORT", text));
  return parse_endpoint(text, 1);
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  return false;
}

bool StreamDecoder::fail(const std::string& why) {
  if (error_.empty()) error_ = why;
  return false;
}

bool StreamDecoder::feed(const void* data, size_t n, Output& out) {
  if (!error_.empty()) return false;
  // Compact, then append.
  if (consumed_ > 0) {
    buf_.erase(buf_.begin(), buf_.begin() + long(consumed_));
    offset_ += consumed_;
    consumed_ = 0;
  }
  const auto* p = static_cast<const unsigned char*>(data);
  buf_.insert(buf_.end(), p, p + n);

  for (;;) {
    const size_t avail = buf_.size() - consumed_;
    if (avail == 0) return true;  // (and no memcmp of an empty buffer's null data)
    const unsigned char* cur = buf_.data() + consumed_;
    const uint64_t at = offset_ + consumed_;
    if (!hello_done_) {
      const size_t check = std::min(avail, sizeof kStreamMagic);
      if (std::memcmp(cur, kStreamMagic, check) != 0)
        return fail(fmt::format("not a memcomm live stream (bad hello magic at stream offset {})", at));
      if (avail < sizeof(StreamHello)) return true;
      StreamHello h;
      std::memcpy(&h, cur, sizeof h);
      h.host[sizeof h.host - 1] = '\0';
      std::string why;
      if (!out.on_hello(h, why)) return fail(why);
      hello_done_ = true;
      consumed_ += sizeof h;
      continue;
    }
    if (avail < sizeof(ChunkHeader)) {
      const size_t check = std::min<size_t>(avail, 4);
      if (check && std::memcmp(cur, &kChunkMagic, check) != 0)
        return fail(fmt::format("bad frame magic at stream offset {}", at));
      return true;
    }
    ChunkHeader h;
    std::memcpy(&h, cur, sizeof h);
    if (const std::string bad = ChunkDecoder::check_header(h, max_frame_); !bad.empty())
      return fail(fmt::format("frame {} at stream offset {}: {}", frames_, at, bad));
    if (avail < sizeof h + h.stored_size) return true;
    const Event* ev = nullptr;
    size_t count = 0;
    new_defs_.clear();
    if (const std::string bad = dec_.decode(h, cur + sizeof h, strings_, ev, count, &new_defs_); !bad.empty())
      return fail(fmt::format("frame {} at stream offset {}: {}", frames_, at, bad));
    out.on_frame(new_defs_, ev, count);
    ++frames_;
    events_ += count;
    consumed_ += sizeof h + h.stored_size;
  }
}

}  // namespace memcomm::prof
