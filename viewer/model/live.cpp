#include <memcomm/view/live.hpp>

#include <memcomm/profiler/stream_receiver.hpp>

#include "ingest_trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace memcomm::view {

struct LiveSession::RankStream {
  std::uint32_t rank = 0;
  std::string host;
  bool connected = false;
  bool ended = false;           // its newest connection ended the stream (Note [The end of a stream])
  std::uint64_t received = 0;  // events from this rank, all connections
  std::uint64_t stream_id = 0;  // its sender's identity (0: a sender that gives none)
  int connection = -1;          // its newest connection
  int data_connection = -1;     // the connection whose events the ingest resolved names for last
};

// Note [A stream that reconnects]
// A sender whose viewer stalls (stopped, swapped out) gives up on the send after a timeout and
// connects again, and again, while its earlier connections still hold unread data: the viewer, once
// it runs, meets each new connection while the rank's old one is still open. Taken for another run
// claiming the rank, each got lanes of its own: a stall of 30 s showed a two-rank run as ten ranks,
// eight of them empty. So the hello carries the sender's identity (stream_id, drawn once per
// sender), and a connection from the identity already holding the rank continues that rank; the
// old connection's remaining data still lands there, each connection with its own string table, and
// only the newest connection's end disconnects the rank. Another identity (or a sender that gives
// none) claiming a connected rank is another run, shown apart.

// See Note [Live rebuild] in live.hpp: events go into the builder's arrays as they arrive (no copy of the raw
// stream is kept); publish() appends them to the model (Note [Incremental append]).
struct LiveSession::Impl {
  std::unique_ptr<prof::StreamReceiver> receiver;
  std::map<std::uint32_t, RankStream> ranks;       // by rank (a reconnecting rank continues)
  std::map<int, std::uint32_t> connection_rank;    // connection id -> rank
  std::map<int, std::unordered_map<prof::StringId, std::string>> connection_strings;  // each connection's table
  TimelineBuilder builder;
  TraceIngest ingest{builder};

  // The rank a new stream claiming `claimed` is shown as: that rank, unless a stream of it is still
  // connected (two runs, or two processes that know no rank): then one past every rank shown, so the
  // second stream neither shares the first one's lanes nor wipes its string table.
  std::uint32_t slot_for(std::uint32_t claimed, std::uint64_t stream_id) const {
    const auto it = ranks.find(claimed);
    if (it == ranks.end() || !it->second.connected) return claimed;
    if (stream_id != 0 && it->second.stream_id == stream_id) return claimed;  // Note [A stream that reconnects]
    return ranks.rbegin()->first + 1;
  }
  // A rank's (new) connection, and the events of one.
  void connected(const prof::LiveMessage& m, std::vector<std::string>& messages);
  void disconnected(const prof::LiveMessage& m, std::vector<std::string>& messages);
  std::size_t data(prof::LiveMessage& m);
};

LiveSession::LiveSession() : impl_(std::make_unique<Impl>()) {}
LiveSession::~LiveSession() = default;

bool LiveSession::start(const std::string& endpoint, std::string& error) {
  try {
    prof::ReceiverOptions o;
    o.endpoint = prof::parse_endpoint(endpoint);
    o.quiet = true;  // messages go to the UI (and stderr) through poll()
    impl_->receiver = std::make_unique<prof::StreamReceiver>(o);
    impl_->receiver->start();
    return true;
  } catch (const std::exception& e) {
    error = e.what();
    impl_->receiver.reset();
    return false;
  }
}

bool LiveSession::poll(std::vector<std::string>& messages, double now_s) {
  if (!impl_->receiver) return false;
  std::vector<prof::LiveMessage> in;
  impl_->receiver->poll(in);
  return take(in, messages, now_s);
}

bool LiveSession::take(std::vector<prof::LiveMessage>& in, std::vector<std::string>& messages, double now_s) {
  for (auto& m : in) {
    switch (m.type) {
      case prof::LiveMessage::Type::Connected:
        impl_->connected(m, messages);
        dirty_ = true;
        break;
      case prof::LiveMessage::Type::Data: {
        const std::size_t n = impl_->data(m);
        events_ += n;
        dirty_ = dirty_ || n > 0;
        break;
      }
      case prof::LiveMessage::Type::Disconnected:
        impl_->disconnected(m, messages);
        dirty_ = true;
        break;
      case prof::LiveMessage::Type::Error:
        messages.push_back("live: " + m.text);
        break;
    }
  }
  in.clear();
  if (dirty_ && now_s - last_build_s_ >= min_rebuild_s_) {
    last_build_s_ = now_s;
    dirty_ = false;
    return true;
  }
  return false;
}

void LiveSession::Impl::connected(const prof::LiveMessage& m, std::vector<std::string>& messages) {
  const std::uint32_t claimed = m.rank == prof::kUnknownRank ? 0 : m.rank;
  const std::uint32_t rank = slot_for(claimed, m.stream_id);
  auto held = ranks.find(claimed);
  const bool reconnect = rank == claimed && held != ranks.end() && held->second.connected;
  if (rank != claimed)
    messages.push_back(fmt::format("live: a stream from {} (pid {}) says rank {} while rank {}'s stream is still "
                                   "connected (two runs, or processes that know no rank): shown as rank {}",
                                   m.host, m.pid, claimed, claimed, rank));
  connection_rank[m.connection] = rank;
  connection_strings[m.connection].clear();  // a new connection starts a new string table
  RankStream& rs = ranks[rank];
  rs.rank = rank;
  rs.host = m.host;
  rs.connected = true;
  rs.ended = false;
  rs.stream_id = m.stream_id;
  rs.connection = m.connection;
  builder.host(rank, m.host);  // the rank gets its lane group before its first event
  messages.push_back(reconnect ? fmt::format("live: rank {} connected again from {} (pid {}) before its last connection "
                                             "closed (this viewer was not reading)", rank, m.host, m.pid)
                               : fmt::format("live: rank {} connected from {} (pid {})", rank, m.host, m.pid));
  if (m.events_before > rs.received) {
    // It sent events that this viewer never saw (to an earlier viewer, or lost while this one was not
    // reading): its block events do not start at the beginning (Note [Memory curves from block events] in
    // allocator_fold.hpp). Events of its old connection still unread are counted as lost, hence "up to".
    builder.blocks_cut(rank);
    messages.push_back(rs.received == 0
                           ? fmt::format("live: rank {} was running before this viewer ({} events not seen): its "
                                         "memory curves come from its samples", rank, m.events_before)
                           : fmt::format("live: rank {} lost up to {} events while its stream was down: its memory "
                                         "curves come from its samples", rank, m.events_before - rs.received));
  }
}

void LiveSession::Impl::disconnected(const prof::LiveMessage& m, std::vector<std::string>& messages) {
  auto it = connection_rank.find(m.connection);
  connection_strings.erase(m.connection);
  if (it == connection_rank.end() || ranks[it->second].connection != m.connection)
    return;  // an older connection of a rank that reconnected ends quietly
  RankStream& rs = ranks[it->second];
  rs.connected = false;
  rs.ended = m.ended;
  messages.push_back(m.ended ? fmt::format("live: rank {} ended its stream", it->second)
                             : fmt::format("live: rank {} disconnected: {}", it->second, m.text));
}

std::size_t LiveSession::Impl::data(prof::LiveMessage& m) {
  auto it = connection_rank.find(m.connection);
  const std::uint32_t rank = it != connection_rank.end() ? it->second : (m.rank == prof::kUnknownRank ? 0 : m.rank);
  RankStream& rs = ranks[rank];
  rs.rank = rank;
  auto& table = connection_strings[m.connection];
  for (auto& [id, text] : m.strings) table[id] = std::move(text);
  if (rs.data_connection != m.connection) {  // names resolve against this connection's table from here
    ingest.reset_strings(rank);
    rs.data_connection = m.connection;
  }
  const auto strings = [&table](prof::StringId id) -> std::string_view {
    auto s = table.find(id);
    return s != table.end() ? std::string_view(s->second) : std::string_view();
  };
  ingest.add(m.events.data(), m.events.size(), rank, strings, true);
  rs.received += m.events.size();
  return m.events.size();
}

AppendResult LiveSession::publish(Timeline& tl) {
  AppendResult r = impl_->builder.append_to(tl);
  for (auto& rd : tl.ranks) {
    auto it = impl_->ranks.find(rd.rank);
    rd.connected = it != impl_->ranks.end() && it->second.connected;
    rd.stream_ended = it != impl_->ranks.end() && it->second.ended;
  }
  if (tl.sources.empty()) tl.sources.push_back("live");
  return r;
}

bool LiveSession::refresh_allocations(Timeline& tl) { return impl_->builder.refresh_allocations(tl); }

LiveStats LiveSession::stats() const {
  LiveStats s;
  if (!impl_->receiver) return s;
  const auto r = impl_->receiver->stats();
  s.connections = r.connections;
  s.active = r.active;
  s.events = r.events;
  s.dropped = r.dropped;
  s.errors = r.errors;
  s.port = impl_->receiver->port();
  return s;
}

}  // namespace memcomm::view
