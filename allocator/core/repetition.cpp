// Note [Detected repetition]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch snapshots and most programs give no step markers, yet training iterations repeat their
// allocation sequence. With config.detect_repetition (the default in planned mode, until the first
// step_marker()) planned mode finds the period online, from allocations already made:
//
// - Every allocation's key is its (rounded size, stream). A hash of the last kWindow keys, together
//   with a coarse bucket of the live bytes before the newest one, is looked up in a table of earlier
//   windows: a hit j allocations ago proposes the period T = j. The live-bytes bucket keeps the
//   repeated layers inside one iteration (same keys, but more or fewer bytes alive) from proposing
//   their short period as often as the iteration's own.
// - A candidate is followed allocation by allocation: `run` counts allocations in a row equal to the
//   one T before, and a mismatch drops the candidate. It is confirmed once a whole period has repeated
//   (run >= T) and the live bytes came back to where they were a period ago (within 1/32); layer
//   repetition fails the second test, because an iteration's layers stack up or tear down memory.
// - The iteration boundary is put where the live bytes were lowest during the last period, so that the
//   fewest allocations straddle it (those stay on the caching path). Planning starts at the next
//   occurrence of that boundary, T allocations after it.
// - At every boundary whose previous iteration did not follow the plan, the last T allocations -- a
//   complete iteration, in the past -- are packed into the arena by lifetime-aware best fit
//   (Note [Planned mode]), the arena is mapped (outside the lock), and the iteration is served from it
//   while the keys match. The first mismatch falls back to the caching path (never failing) and drops
//   the period until a new one is confirmed; a busy arena range falls back only for that iteration.
// Only allocations seen so far are used: nothing is learned from the future.

#include <algorithm>
#include <cstdlib>

#include "allocator_impl.hpp"
#include "planner.hpp"

namespace memcomm::alloc {

namespace {

constexpr std::size_t kWindow = 8;  // keys per window hash

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

// ~6% wide buckets of a byte count: the exponent and the next four bits.
std::uint64_t live_bucket(std::int64_t live) {
  if (live <= 0) return 0;
  const auto v = std::uint64_t(live);
  const int e = 63 - __builtin_clzll(v);
  const std::uint64_t m = e >= 4 ? (v >> (e - 4)) & 15 : v;
  return std::uint64_t(e) * 16 + m + 1;
}

}  // namespace

void CachingAllocator::Impl::plan_trim() {
  PlanImpl& p = *plan;
  const std::size_t keep = 2 * config.max_plan_period + kWindow;
  if (p.rec.size() < 2 * keep) return;
  const std::size_t drop = p.rec.size() - keep;
  p.rec.erase(p.rec.begin(), p.rec.begin() + std::ptrdiff_t(drop));
  p.live_before.erase(p.live_before.begin(), p.live_before.begin() + std::ptrdiff_t(drop));
  p.rec_base += drop;
  if (p.windows.size() > 2 * keep) p.windows.clear();
}

void CachingAllocator::Impl::plan_detect() {
  PlanImpl& p = *plan;
  const std::size_t n = p.rec.size() - 1;  // the allocation just recorded
  auto same = [&](std::size_t i, std::size_t j) {
    return p.rec[i].size == p.rec[j].size && p.rec[i].stream == p.rec[j].stream;
  };
  if (p.period) {
    if (n >= p.period && same(n, n - p.period)) {
      ++p.run;
    } else {  // the sequence left the period: the plan (if any) already deviated in plan_allocate
      p.period = 0;
      p.run = 0;
      p.next_start = kNever;
    }
  }
  if (n + 1 < kWindow) return;
  std::uint64_t h = live_bucket(p.live_before[n]);
  for (std::size_t i = n + 1 - kWindow; i <= n; ++i) h = mix(h, mix(p.rec[i].size, std::uint64_t(p.rec[i].stream)));
  const std::uint64_t number = p.rec_base + n;
  auto [it, fresh] = p.windows.try_emplace(h, number);
  const std::uint64_t earlier = it->second;
  it->second = number;
  if (!p.period && !fresh && earlier >= p.rec_base) {
    const std::uint64_t t = number - earlier;
    if (t >= std::max<std::size_t>(kWindow, config.min_plan_allocs) && t <= config.max_plan_period && t <= n) {
      std::uint64_t run = 0;  // allocations in a row (ending now) equal to the one t before
      while (run <= t && run + t <= n && same(n - run, n - run - t)) ++run;
      if (run >= kWindow) {  // else a hash collision
        p.period = t;
        p.run = run;
      }
    }
  }
  // Two whole periods must repeat, two more for every iteration that left a plan.
  if (!p.period || p.next_start != kNever || p.run < (2 + 2 * p.misses) * p.period) return;
  const std::int64_t now = p.live_before[n], then = p.live_before[n - p.period];
  if (std::abs(now - then) > std::max(now, then) / 32) return;  // layers, not iterations: keep looking
  // Confirmed: the boundary goes where live bytes were lowest during the last period.
  std::size_t s = n;
  for (std::size_t i = n + 1 - p.period; i <= n; ++i)
    if (p.live_before[i] < p.live_before[s]) s = i;
  p.next_start = p.rec_base + s + p.period;
  p.detections++;
}

// At the allocation that begins a detected iteration (called with mu held).
bool CachingAllocator::Impl::plan_begin_detected() {
  PlanImpl& p = *plan;
  const std::uint64_t t = p.period;
  p.next_start += t;
  const bool followed = p.followed() && p.items.size() == t;
  p.begin_iteration();
  // No trim here (Note [Trimming after a followed plan]): a detected period is often one layer or
  // micro-step, and the cache's pages serve the rest of the real step.
  if (followed) return false;
  // Plan from the iteration that just ended: the last t allocations, all in the past.
  p.active = false;
  p.pending_arena = pack_window(p.rec, p.rec.size() - t, t, p.clock, page, p.pending_items);
  if (p.pending_arena == 0) p.pending_items.clear();
  return !p.pending_items.empty();
}

}  // namespace memcomm::alloc
