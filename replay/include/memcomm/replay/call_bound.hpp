// The fewest source calls any online policy can make on a request sequence while guaranteeing peak
// reserved <= ratio x peak live: the yardstick for the "source calls <= pytorch's" target next to
// the "reserved <= 1.05 x live" one (bench/replay/call_bound.cpp tabulates it; tests assert against it).
#pragma once

#include <cstdint>

#include "memcomm/replay/requests.hpp"

namespace memcomm::replay {

// Note [Ideal online call bound]: online, a policy that never exceeds `ratio` x the peak live bytes
// *so far* is the only kind that can guarantee `ratio` (the trace may end at any request), so the
// best it can do at each source call is to map up to `ratio` x that high water. This is that ideal:
// no fragmentation at all (one address space, live bytes packed perfectly), 2 MiB pages, requests
// rounded to 512 B, one call whenever live bytes outgrow what is mapped. Real allocators fragment,
// so they need at least this many calls. ratio >= 1.
std::uint64_t ideal_calls(const DeviceRequests& dev, double ratio);

// The ratio memcomm-replay reports the bound at (its call_bound field and column): the issue's
// reserved <= 1.03 x live target.
inline constexpr double kCallBoundRatio = 1.03;

}  // namespace memcomm::replay
