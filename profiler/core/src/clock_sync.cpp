// Clock offset from round trips: Note [Clock offset from round trips] in clock_sync.hpp.
#include "memcomm/profiler/clock_sync.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "memcomm/trace/clock.hpp"

namespace memcomm::prof {

ClockOffsetEstimate estimate_clock_offset(const std::vector<ClockProbe>& all) {
  std::vector<ClockProbe> probes;
  probes.reserve(all.size());
  for (const ClockProbe& p : all) {
    const bool ordered = p.local_recv_ns >= p.local_send_ns && p.peer_send_ns >= p.peer_recv_ns;
    if (ordered && p.delay_ns() >= 0) probes.push_back(p);
  }
  if (probes.empty())
    throw std::invalid_argument("estimate_clock_offset: no valid probe among " + std::to_string(all.size()) +
                                " (each needs t0 <= t3, t1 <= t2 and a round trip no shorter than the turnaround)");
  std::sort(probes.begin(), probes.end(),
            [](const ClockProbe& a, const ClockProbe& b) { return a.delay_ns() < b.delay_ns(); });

  ClockOffsetEstimate est;
  est.probes = int(probes.size());
  est.min_delay_ns = probes.front().delay_ns();
  est.used = std::max(1, est.probes / 4);
  std::vector<int64_t> offsets;
  for (int i = 0; i < est.used; ++i) offsets.push_back(probes[size_t(i)].offset_ns());
  std::sort(offsets.begin(), offsets.end());
  const size_t mid = offsets.size() / 2;
  int64_t offset = offsets.size() % 2 ? offsets[mid] : offsets[mid - 1] + (offsets[mid] - offsets[mid - 1]) / 2;

  // Every probe's interval holds the truth; their intersection bounds the error.
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  for (const ClockProbe& p : probes) {
    const int64_t half = (p.delay_ns() + 1) / 2;  // rounded up: offset_ns() truncated
    lo = std::max(lo, p.offset_ns() - half);
    hi = std::min(hi, p.offset_ns() + half);
  }
  if (lo <= hi) {
    offset = std::clamp(offset, lo, hi);
    est.error_bound_ns = std::max(offset - lo, hi - offset);
  } else {
    est.intervals_agree = false;
    offset = probes.front().offset_ns();
    est.used = 1;
    est.error_bound_ns = (est.min_delay_ns + 1) / 2;
  }
  est.offset_ns = offset;
  return est;
}

ClockOffsetEstimate estimate_clock_offset(const ClockExchange& exchange, int rounds,
                                          const std::function<int64_t()>& local_clock) {
  if (!exchange) throw std::invalid_argument("estimate_clock_offset: no exchange callback");
  if (rounds < 1) throw std::invalid_argument("estimate_clock_offset: rounds must be >= 1, got " + std::to_string(rounds));
  const auto clock = local_clock ? local_clock : std::function<int64_t()>([] { return now_ns(); });
  std::vector<ClockProbe> probes;
  probes.reserve(size_t(rounds));
  for (int i = 0; i < rounds; ++i) {
    ClockProbe p{};
    p.local_send_ns = clock();
    const bool ok = exchange(p.peer_recv_ns, p.peer_send_ns);
    p.local_recv_ns = clock();
    if (ok) probes.push_back(p);
  }
  if (probes.empty())
    throw std::invalid_argument("estimate_clock_offset: all " + std::to_string(rounds) + " exchanges failed");
  return estimate_clock_offset(probes);
}

}  // namespace memcomm::prof
