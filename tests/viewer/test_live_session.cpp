// LiveSession without a window: what memcomm-view --listen makes of its streams.
#include "memcomm_test.hpp"

#include <memcomm/profiler/stream_sink.hpp>
#include <memcomm/view/live.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace memcomm::view;
namespace prof = memcomm::prof;

namespace {

std::vector<prof::Event> one_step(std::int64_t length) {
  return {prof::Event::from(prof::make_range(prof::EventKind::RangeBegin, 0, prof::Phase::Step, 0, 0, 0)),
          prof::Event::from(prof::make_range(prof::EventKind::RangeEnd, length, prof::Phase::Step, 0, 0, 0))};
}

std::unique_ptr<prof::StreamSink> connect(std::uint16_t port, std::uint32_t rank, const std::vector<prof::Event>& ev,
                                          std::uint64_t stream_id = 0) {
  prof::StreamOptions so;
  so.stream_id = stream_id;
  so.endpoint = prof::parse_endpoint("127.0.0.1:" + std::to_string(port));
  so.rank = rank;
  so.world_size = 1;
  so.quiet = true;
  auto sink = std::make_unique<prof::StreamSink>(so);
  prof::Batch b;
  b.events = ev.data();
  b.n_events = ev.size();
  sink->consume(b);
  return sink;
}

// Polls a session as the viewer's frames do, keeping what it says.
struct Poller {
  explicit Poller(LiveSession& session) : live(session) {}
  LiveSession& live;
  std::vector<std::string> messages;
  double now = 0;
  // Polls until `events` have arrived, or `tries` polls 10 ms apart have passed (0: wait for none).
  void poll(std::uint64_t events, int tries = 500) {
    for (int i = 0; i < tries && (events == 0 || live.events_received() < events); ++i) {
      live.poll(messages, now += 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  bool said(const std::string& text) const {
    return std::any_of(messages.begin(), messages.end(), [&](const std::string& m) { return m.find(text) != std::string::npos; });
  }
};

}  // namespace

TEST_CASE("live: a second stream claiming a connected rank gets lanes of its own", "[unit][viewer]") {
  // Two runs (or two processes that know no rank) streaming to one viewer both say rank 0: merged,
  // their steps interleaved and the second connection wiped the first one's string table.
  LiveSession live;
  std::string error;
  REQUIRE(live.start("127.0.0.1:0", error));
  const std::uint16_t port = live.stats().port;
  const auto first_events = one_step(1000), second_events = one_step(5000);
  auto first = connect(port, 0, first_events);
  Poller p(live);
  p.poll(first_events.size());
  auto second = connect(port, 0, second_events);
  p.poll(first_events.size() + second_events.size());
  Timeline tl;
  live.publish(tl);
  first->close(5000);
  second->close(5000);
  INFO(fmt::format("{}", fmt::join(p.messages, "\n")));
  REQUIRE(tl.ranks.size() == 2);
  CHECK(tl.ranks[0].rank == 0);
  CHECK(tl.ranks[1].rank == 1);
  CHECK(p.said("says rank 0 while rank 0's stream is still connected"));
}

TEST_CASE("live: a sender that connects again before its old connection closed continues its rank", "[unit][viewer]") {
  // See Note [A stream that reconnects]: a viewer stopped for 30 s met each rank's reconnects while
  // the old connections were open, and showed a two-rank run as ten ranks. The same sender (one
  // stream_id, as a StreamSink keeps across its reconnects) stays one rank; its old connection's end
  // leaves the rank connected.
  LiveSession live;
  std::string error;
  REQUIRE(live.start("127.0.0.1:0", error));
  const std::uint16_t port = live.stats().port;
  const auto first_events = one_step(1000), second_events = one_step(5000);
  Poller p(live);
  auto first = connect(port, 0, first_events, 42);
  p.poll(first_events.size());
  auto again = connect(port, 0, second_events, 42);
  p.poll(first_events.size() + second_events.size());
  first->close(5000);
  p.poll(0, 50);  // the old connection's end arrives
  Timeline tl;
  live.publish(tl);
  INFO(fmt::format("{}", fmt::join(p.messages, "\n")));
  REQUIRE(tl.ranks.size() == 1);
  CHECK(tl.ranks[0].rank == 0);
  CHECK(tl.ranks[0].connected);  // the old connection's end did not disconnect it
  CHECK(p.said("rank 0 connected again from"));
  again->close(5000);
}
