// Planned mode: matching a marked iteration's allocations to the plan, and the arena's gaps
// (Note [Planned mode] in planner.cpp).
//
// Note [Reordered iterations]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// memcomm-train's own traces (loader threads allocate the next batch while the training thread runs)
// repeat every step's allocations, but not their order: the 512 B, 1.5 KiB and 98 KiB batch tensors
// land anywhere in the sequence, conv workspaces alternate between two sizes, the first step also
// creates the optimizer state, and frees come a few events early or late. Strict position matching left
// the plan at allocation 0 to 70 of most steps and re-planned at every marker; the arena was given back
// for the cache's growth and mapped again: 302 and 615 source calls on out/demo.rank{0,1}.mct (caching
// path: 10) at up to 1.18 x live. So, with markers:
// - An allocation matches the first unmatched item of its size and stream within kLookahead items of
//   the latest match (`taken` marks matched items), so reordering costs nothing and an item this step
//   never makes does not block the rest.
// - An allocation that matches nothing, or whose planned range is still in use and finds no free gap of
//   the arena that fits (arena_gap), goes to the caching path alone (num_plan_misses); only after
//   max(kMinMisses, items / kMissShare) of them does the rest of the iteration leave the plan.
// - When the caching path has no free block for a marked iteration's allocation, a free gap of the mapped
//   arena serves it before the cache grows beside the arena (plan_gap_allocate) -- a mapped gap costs
//   nothing, growing the cache costs a map call -- except for an item the plan packed outside the
//   arena: it outlives the iteration and would pin arena pages (arena_keep) and sit on planned ranges.
//   Misses do take gaps although their lifetime is unknown, even while items are still to come: one
//   still alive when a later item's planned range comes up sends that item to another gap or the
//   cache. Taking gaps only once nothing more is planned in the iteration (!active, deviated, or every
//   item matched) served the same planned allocations (41,767 / 41,170 -> 41,769 / 41,172) with the
//   same re-plans (8 / 10) and peaks on out/demo.rank{0,1}.mct, but cost 16 -> 17 and 13 -> 19 source
//   allocations; so misses keep the gaps.
// - A plan is packed only from an iteration whose multiset of (size, stream) equals the previous
//   iteration's (signature()): never from the warm-up step or one of a phase change.
// - An iteration that did not follow the plan drops it (its arena stays mapped for the next one); a plan
//   is mapped only within the larger of the page budget and the peak reserved bytes so far, after the
//   cache's free pages are given back, so switching to it never raises the peak.
// - While nothing more is planned in the iteration (it left the plan, or every item is matched), the
//   arena's pages above its highest live block go back when the cache must grow past the budget.
// - Trimming after a followed iteration keeps the pages the caching path mapped for misses
//   (trim_extra), which would otherwise be unmapped and mapped again every iteration.
// Detected plans stay strict: there a mismatch also ends the detected period.

#include <algorithm>

#include "allocator_impl.hpp"
#include "planner.hpp"

namespace memcomm::alloc {

namespace {
// Note [Reordered iterations]: how far ahead of the first unmatched item an allocation may match, and
// how many allocations of an iteration may miss the plan (at least kMinMisses, else 1/kMissShare of
// the plan's items) before the rest of it goes to the caching path.
constexpr std::size_t kLookahead = 64;
constexpr std::size_t kMinMisses = 4;
constexpr std::size_t kMissShare = 4;
}  // namespace

bool CachingAllocator::Impl::plan_iteration_begins() {
  const PlanImpl& p = *plan;
  return p.next_start == p.rec_base + p.rec.size() && plan_begin_detected();  // Note [Detected repetition]
}

void* CachingAllocator::Impl::plan_allocate(std::size_t size, std::size_t requested, StreamId stream) {
  PlanImpl& p = *plan;
  p.matched_outside = false;
  if (!p.active || p.deviated) return nullptr;
  auto deviate = [&]() REQUIRES(mu) -> void* {
    p.deviated = true;
    p.misses++;
    stats.num_plan_deviations++;
    return nullptr;
  };
  // Note [Reordered iterations]: with markers, an allocation the plan cannot serve goes to the caching
  // path alone, until there are too many of them; detected plans stay strict (their period is gone).
  const bool tolerant = p.markers;
  auto miss = [&]() REQUIRES(mu) -> void* {
    if (!tolerant || ++p.iter_misses > std::max(kMinMisses, p.items.size() / kMissShare)) return deviate();
    stats.num_plan_misses++;
    return nullptr;
  };
  const std::size_t n = p.items.size();
  while (p.pos < n && p.taken[p.pos]) ++p.pos;
  // The window follows the latest match, so an item this iteration never makes does not hold it back.
  const std::size_t stop = std::min(n, tolerant ? std::max(p.pos, p.next_match) + kLookahead : p.pos + 1);
  std::size_t j = p.pos;
  while (j < stop && (p.taken[j] || p.items[j].size != size || p.items[j].stream != stream)) ++j;
  // Not in the plan (a size that changed, an extra tensor): the caching path, not a planned range. Its
  // lifetime is unknown; it takes an arena gap only if the cache has no free block (plan_gap_allocate).
  if (j == stop) return miss();
  const PlanItem& it = p.items[j];
  p.taken[j] = 1;
  p.matched++;
  p.next_match = std::max(p.next_match, j + 1);
  if (!it.in_arena) {
    p.matched_outside = true;  // it outlives the iteration: never into an arena gap (plan_gap_allocate)
    return nullptr;
  }
  std::size_t offset = it.offset;
  auto next = p.live.lower_bound(offset);
  const bool busy = (next != p.live.end() && next->first < offset + size) ||
                    (next != p.live.begin() && std::prev(next)->second > offset);
  if (busy) {
    // Its planned range is still in use (a block freed later than in the recorded iteration): a free
    // gap of the arena instead, else the cache.
    if (!tolerant || (offset = p.arena_gap(size)) == kNoGap) return miss();
  }
  return plan_place(offset, size, requested, stream, true);
}

// A planned block at `offset` of the arena (called with mu held).
void* CachingAllocator::Impl::plan_place(std::size_t offset, std::size_t size, std::size_t requested, StreamId stream,
                                         bool from_plan) {
  PlanImpl& p = *plan;
  p.live.emplace(offset, offset + size);
  Block* b = new_block();
  b->addr = p.arena->base + offset;
  b->size = size;
  b->requested = requested;
  b->segment = p.arena;
  b->planned = true;
  b->stream = stream;
  b->allocated = true;
  live.insert(b->addr, b);
  p.arena_blocks++;
  stats.allocation.increase(1);
  stats.active.increase(1);
  stats.allocated_bytes.increase(std::int64_t(size));
  p.arena_allocated += std::int64_t(size);
  stats.active_bytes.increase(std::int64_t(size));
  stats.requested_bytes.increase(std::int64_t(requested));
  if (from_plan) stats.num_planned_allocs++;
  if (stats.allocated_bytes.current > allocated_high_water) allocated_high_water = stats.allocated_bytes.current;
  emit(EventKind::Alloc, b->addr, size, requested, stream);
  plan_record_alloc(b);
  return reinterpret_cast<void*>(b->addr);
}

// The caching path found no free block for a marked iteration's allocation: a free gap of the mapped
// arena serves it if one fits, before the cache grows beside the arena -- a miss too, but never an
// item the plan packed outside the arena (Note [Reordered iterations]).
void* CachingAllocator::Impl::plan_gap_allocate(std::size_t size, std::size_t requested, StreamId stream) {
  PlanImpl& p = *plan;
  if (!p.markers || !p.arena || p.mapping || p.items.empty() || stream != p.items.front().stream) return nullptr;
  if (p.matched_outside) return nullptr;
  const std::size_t offset = p.arena_gap(size);
  if (offset == kNoGap) return nullptr;
  return plan_place(offset, size, requested, stream, false);
}

}  // namespace memcomm::alloc
