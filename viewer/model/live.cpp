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
  std::uint64_t received = 0;  // events from this rank, all connections
  std::unordered_map<prof::StringId, std::string> strings;  // this connection's string table
};

// See Note [Live rebuild] in live.hpp: events go into the builder's arrays as they arrive (no copy of the raw
// stream is kept); publish() appends them to the model (Note [Incremental append]).
struct LiveSession::Impl {
  std::unique_ptr<prof::StreamReceiver> receiver;
  std::map<std::uint32_t, RankStream> ranks;       // by rank (a reconnecting rank continues)
  std::map<int, std::uint32_t> connection_rank;    // connection id -> rank
  TimelineBuilder builder;
  TraceIngest ingest{builder};

  // The rank a new stream claiming `claimed` is shown as: that rank, unless a stream of it is still
  // connected (two runs, or two processes that know no rank): then one past every rank shown, so the
  // second stream neither shares the first one's lanes nor wipes its string table.
  std::uint32_t slot_for(std::uint32_t claimed) const {
    const auto it = ranks.find(claimed);
    if (it == ranks.end() || !it->second.connected) return claimed;
    return ranks.rbegin()->first + 1;
  }
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
  for (auto& m : in) {
    switch (m.type) {
      case prof::LiveMessage::Type::Connected: {
        const std::uint32_t claimed = m.rank == prof::kUnknownRank ? 0 : m.rank;
        const std::uint32_t rank = impl_->slot_for(claimed);
        if (rank != claimed)
          messages.push_back(fmt::format("live: a stream from {} (pid {}) says rank {} while rank {}'s stream is still "
                                         "connected (two runs, or processes that know no rank): shown as rank {}",
                                         m.host, m.pid, claimed, claimed, rank));
        impl_->connection_rank[m.connection] = rank;
        RankStream& rs = impl_->ranks[rank];
        rs.rank = rank;
        rs.host = m.host;
        rs.connected = true;
        rs.strings.clear();  // a new connection starts a new string table
        impl_->ingest.reset_strings(rank);
        impl_->builder.host(rank, m.host);  // the rank gets its lane group before its first event
        messages.push_back(fmt::format("live: rank {} connected from {} (pid {})", rank, m.host, m.pid));
        if (m.events_before > rs.received) {
          // It sent events to an earlier viewer that this one never saw: its block events do not
          // start at the beginning (Note [Memory curves from block events] in allocator_fold.hpp).
          impl_->builder.blocks_cut(rank);
          messages.push_back(fmt::format("live: rank {} was running before this viewer ({} events not seen): its "
                                         "memory curves come from its samples", rank, m.events_before - rs.received));
        }
        dirty_ = true;
        break;
      }
      case prof::LiveMessage::Type::Data: {
        auto it = impl_->connection_rank.find(m.connection);
        const std::uint32_t rank = it != impl_->connection_rank.end() ? it->second : (m.rank == prof::kUnknownRank ? 0 : m.rank);
        RankStream& rs = impl_->ranks[rank];
        rs.rank = rank;
        for (auto& [id, text] : m.strings) rs.strings[id] = std::move(text);
        const auto strings = [&rs](prof::StringId id) -> std::string_view {
          auto s = rs.strings.find(id);
          return s != rs.strings.end() ? std::string_view(s->second) : std::string_view();
        };
        impl_->ingest.add(m.events.data(), m.events.size(), rank, strings, true);
        events_ += m.events.size();
        rs.received += m.events.size();
        dirty_ = dirty_ || !m.events.empty();
        break;
      }
      case prof::LiveMessage::Type::Disconnected: {
        auto it = impl_->connection_rank.find(m.connection);
        if (it != impl_->connection_rank.end()) {
          impl_->ranks[it->second].connected = false;
          messages.push_back(fmt::format("live: rank {} disconnected: {}", it->second, m.text));
        }
        dirty_ = true;
        break;
      }
      case prof::LiveMessage::Type::Error:
        messages.push_back("live: " + m.text);
        break;
    }
  }
  if (dirty_ && now_s - last_build_s_ >= min_rebuild_s_) {
    last_build_s_ = now_s;
    dirty_ = false;
    return true;
  }
  return false;
}

AppendResult LiveSession::publish(Timeline& tl) {
  AppendResult r = impl_->builder.append_to(tl);
  for (auto& rd : tl.ranks) {
    auto it = impl_->ranks.find(rd.rank);
    rd.connected = it != impl_->ranks.end() && it->second.connected;
  }
  if (tl.sources.empty()) tl.sources.push_back("live");
  return r;
}

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
