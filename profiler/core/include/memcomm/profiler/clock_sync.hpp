// Estimating a peer's clock offset from round trips, for merging ranks that run on different
// hosts (Note [Merging ranks] in event.hpp). Transport-free: the caller supplies the exchange.
//
// Note [Clock offset from round trips]
// One probe is NTP's four timestamps: t0 local send, t1 peer receive, t2 peer reply, t3 local
// receive, t0/t3 on the local clock and t1/t2 on the peer's. With d = (t3 - t0) - (t2 - t1) the
// time on the wire (the round trip minus the peer's turnaround), the probe's offset
// ((t1 - t0) + (t2 - t3)) / 2 is exact when both directions took d/2, and whatever the split,
// the true offset lies within +/- d/2 of it (one-way delays are never negative). So:
// - probes with a small round trip are the trustworthy ones (a preempted thread or a queue on
//   the path only ever adds delay): we keep the quarter with the smallest d (at least one) and
//   take the median of their offsets (min-RTT filter; the median resists one lucky outlier);
// - every probe's interval [offset - d/2, offset + d/2] must contain the truth, so their
//   intersection bounds the error; the estimate is clamped into it and error_bound_ns is the
//   distance to its far end. If the intervals do not intersect (the clocks drifted or stepped
//   during the exchange), we fall back to the best probe and its own d/2.
// Use the result as Identity::clock_offset_ns of the local rank when the peer is the reference
// (rank 0): local timestamp + offset_ns = the reference clock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace memcomm::prof {

// One round trip (Note [Clock offset from round trips]).
struct ClockProbe {
  int64_t local_send_ns;  // t0, local clock
  int64_t peer_recv_ns;   // t1, peer clock
  int64_t peer_send_ns;   // t2, peer clock (= t1 when the peer answers at once)
  int64_t local_recv_ns;  // t3, local clock

  // Time on the wire: the round trip minus the peer's turnaround.
  int64_t delay_ns() const { return (local_recv_ns - local_send_ns) - (peer_send_ns - peer_recv_ns); }
  // Peer clock minus local clock, exact if both directions took equally long.
  int64_t offset_ns() const {
    return ((peer_recv_ns - local_send_ns) + (peer_send_ns - local_recv_ns)) / 2;
  }
};

struct ClockOffsetEstimate {
  int64_t offset_ns = 0;       // add to a local timestamp to get the peer's clock
  int64_t error_bound_ns = 0;  // |true offset - offset_ns| <= this (if one-way delays are >= 0)
  int64_t min_delay_ns = 0;    // smallest time on the wire among the probes
  int probes = 0;              // valid probes considered
  int used = 0;                // probes kept by the min-delay filter
  bool intervals_agree = true; // false: no offset fits every probe (drift or a step mid-exchange)
};

// The filter alone (tests, or callers with their own probing loop). Probes whose round trip is
// shorter than the peer's turnaround, or whose times run backwards, are ignored. Throws
// std::invalid_argument when no probe is valid.
ClockOffsetEstimate estimate_clock_offset(const std::vector<ClockProbe>& probes);

// Sends `rounds` probes through `exchange` and filters them. The callback does one round trip:
// sends a ping to the peer and returns the peer's receive and reply times (peer clock); it
// returns false if the exchange failed (that probe is skipped). The local clock is read right
// before and right after each call (`local_clock`, default now_ns, so the same clock the trace
// uses). The peer answers a ping with its now_ns() read when the ping arrived and again right
// before it replies (one reading for both is fine: the turnaround is then counted as wire time).
// Throws std::invalid_argument when no probe succeeded.
using ClockExchange = std::function<bool(int64_t& peer_recv_ns, int64_t& peer_send_ns)>;
ClockOffsetEstimate estimate_clock_offset(const ClockExchange& exchange, int rounds = 16,
                                          const std::function<int64_t()>& local_clock = {});

}  // namespace memcomm::prof
