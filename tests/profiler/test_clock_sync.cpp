// Clock offset estimation from round trips (clock_sync.hpp): simulated peers with known offsets
// and hostile delays, the filter's edge cases, and a real exchange between two threads.
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <thread>

#include "memcomm/trace/clock.hpp"
#include "memcomm/profiler/clock_sync.hpp"
#include "memcomm_test.hpp"

using namespace memcomm::prof;

namespace {
// A peer whose clock reads `offset` ns ahead of a simulated local clock; each exchange advances
// the local clock by the forward delay, the peer's turnaround, then the return delay.
struct SimulatedLink {
  int64_t offset = 0;
  int64_t local_now = 1'000'000'000;
  std::mt19937_64 rng{7};
  // Delays: a floor plus, on a fraction of probes, queueing on the way to the peer only (a busy
  // receiver), which biases every queued probe's offset the same way.
  int64_t floor_ns = 20'000;
  double queued_fraction = 0.6;
  int64_t queue_max_ns = 3'000'000;

  int64_t delay(bool to_peer) {
    int64_t d = floor_ns + int64_t(rng() % 2000);
    if (to_peer && std::uniform_real_distribution<double>(0, 1)(rng) < queued_fraction)
      d += int64_t(rng() % uint64_t(queue_max_ns));
    return d;
  }
  int64_t clock() { return local_now; }
  bool exchange(int64_t& t1, int64_t& t2) {
    local_now += delay(true);
    t1 = local_now + offset;
    local_now += 5'000 + int64_t(rng() % 5'000);  // turnaround
    t2 = local_now + offset;
    local_now += delay(false);
    return true;
  }
  ClockOffsetEstimate run(int rounds) {
    return estimate_clock_offset([this](int64_t& a, int64_t& b) { return exchange(a, b); }, rounds,
                                 [this] { return clock(); });
  }
};
}  // namespace

TEST_CASE("symmetric delays give the exact offset", "[profiler][clock_sync]") {
  for (int64_t offset : {int64_t(0), int64_t(1'234'567'891), int64_t(-987'654'321)}) {
    SimulatedLink link;
    link.offset = offset;
    link.queued_fraction = 0;
    link.rng.seed(1);
    // Force exact symmetry: the same delay both ways on each probe.
    const auto est = estimate_clock_offset(
        [&](int64_t& t1, int64_t& t2) {
          const int64_t d = link.floor_ns + int64_t(link.rng() % 1000);
          link.local_now += d;
          t1 = link.local_now + offset;
          t2 = t1 + 3000;
          link.local_now += 3000 + d;
          return true;
        },
        8, [&] { return link.clock(); });
    CHECK(est.offset_ns == offset);
    CHECK(est.probes == 8);
    CHECK(est.intervals_agree);
    CHECK(est.error_bound_ns <= link.floor_ns + 1000);  // half the best round trip
  }
}

TEST_CASE("one-way queueing does not fool the min-delay filter", "[profiler][clock_sync]") {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SimulatedLink link;
    link.offset = 5'000'000'000 + int64_t(seed) * 777;
    link.rng.seed(seed);
    const auto est = link.run(32);
    INFO("seed " << seed << " estimate " << est.offset_ns << " bound " << est.error_bound_ns);
    // The truth is within the reported bound, and the bound is about half the best round trip.
    CHECK(std::llabs(est.offset_ns - link.offset) <= est.error_bound_ns);
    CHECK(est.error_bound_ns <= est.min_delay_ns);
    CHECK(est.error_bound_ns < 30'000);
    CHECK(est.used == 8);
    // A plain average of all probes is pulled far off by the queueing.
    link.rng.seed(seed);
    link.local_now = 1'000'000'000;
    std::vector<ClockProbe> probes;
    for (int i = 0; i < 32; ++i) {
      ClockProbe p{};
      p.local_send_ns = link.clock();
      link.exchange(p.peer_recv_ns, p.peer_send_ns);
      p.local_recv_ns = link.clock();
      probes.push_back(p);
    }
    double mean = 0;
    for (const auto& p : probes) mean += double(p.offset_ns() - link.offset) / double(probes.size());
    CHECK(std::fabs(mean) > 10.0 * double(est.error_bound_ns));
    CHECK(estimate_clock_offset(probes).offset_ns == est.offset_ns);
  }
}

TEST_CASE("inconsistent probes fall back to the best one and say so", "[profiler][clock_sync]") {
  // Two probes whose intervals cannot both hold: the peer's clock stepped by 1 ms between them.
  std::vector<ClockProbe> probes = {
      {1000, 11'000, 11'000, 20'000},                // delay 19 us, offset +500 ns
      {30'000, 1'041'000, 1'041'000, 52'000},        // delay 22 us, offset ~ +1 ms
  };
  const auto est = estimate_clock_offset(probes);
  CHECK_FALSE(est.intervals_agree);
  CHECK(est.offset_ns == probes[0].offset_ns());
  CHECK(est.error_bound_ns == (probes[0].delay_ns() + 1) / 2);
  CHECK(est.used == 1);
}

TEST_CASE("invalid probes and failed exchanges are skipped, and none at all is an error", "[profiler][clock_sync]") {
  std::vector<ClockProbe> probes = {
      {100, 50, 40, 200},       // peer times run backwards
      {300, 310, 900, 400},     // turnaround longer than the round trip
      {500, 600, 610, 720},     // valid: delay 210, offset ((100) + (-110)) / 2 = -5
  };
  const auto est = estimate_clock_offset(probes);
  CHECK(est.probes == 1);
  CHECK(est.offset_ns == -5);
  CHECK(est.error_bound_ns == 105);
  CHECK_THROWS_AS(estimate_clock_offset(std::vector<ClockProbe>{}), std::invalid_argument);
  CHECK_THROWS_AS(estimate_clock_offset(std::vector<ClockProbe>{probes[0]}), std::invalid_argument);

  int calls = 0;
  const auto flaky = [&](int64_t& t1, int64_t& t2) {
    t1 = t2 = now_ns();
    return ++calls % 2 == 0;  // every other exchange fails
  };
  const auto half = estimate_clock_offset(flaky, 10);
  CHECK(calls == 10);
  CHECK(half.probes == 5);
  CHECK_THROWS_AS(estimate_clock_offset([](int64_t&, int64_t&) { return false; }, 4), std::invalid_argument);
  CHECK_THROWS_AS(estimate_clock_offset(flaky, 0), std::invalid_argument);
}

TEST_CASE("a real exchange between two threads on one clock finds offset zero within its bound", "[profiler][clock_sync]") {
  clock_init();
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  // The peer: answers each one-byte ping with its receive and send times.
  std::thread peer([fd = fds[1]] {
    char c;
    while (::read(fd, &c, 1) == 1) {
      int64_t t[2];
      t[0] = now_ns();
      t[1] = now_ns();
      if (::write(fd, t, sizeof t) != ssize_t(sizeof t)) break;
    }
  });
  const auto est = estimate_clock_offset(
      [fd = fds[0]](int64_t& t1, int64_t& t2) {
        const char c = 'p';
        if (::write(fd, &c, 1) != 1) return false;
        int64_t t[2];
        size_t got = 0;
        while (got < sizeof t) {
          const ssize_t n = ::read(fd, reinterpret_cast<char*>(t) + got, sizeof t - got);
          if (n <= 0) return false;
          got += size_t(n);
        }
        t1 = t[0];
        t2 = t[1];
        return true;
      },
      64);
  ::shutdown(fds[0], SHUT_RDWR);
  peer.join();
  ::close(fds[0]);
  ::close(fds[1]);
  INFO("offset " << est.offset_ns << " bound " << est.error_bound_ns << " min delay " << est.min_delay_ns);
  CHECK(est.probes == 64);
  CHECK(est.intervals_agree);
  CHECK(std::llabs(est.offset_ns) <= est.error_bound_ns);
}
