// Note [Planned mode]
// ~~~~~~~~~~~~~~~~~~~
// Training iterations repeat their allocation sequence. Between two step_marker() calls the allocator
// records every allocation (rounded size, stream, and the positions of its alloc and free in the
// iteration's event order). At the marker, if the iteration did not follow the current plan, a new plan
// is packed from the recording: allocations freed within the iteration get arena offsets such that two
// allocations alive at the same time never overlap (greedy best fit by decreasing size, the classic
// heuristic for this NP-hard "dynamic storage allocation" problem; it lands within a few % of peak live on
// training graphs); the others outlive the iteration and stay on the caching path. The arena is one
// expandable range mapped once, after lazy release (Note [Lazy page release]) has given back the cached
// pages the plan makes redundant.
// Next iterations are served from the arena while the i-th allocation has the planned size and stream and
// its arena range is not in use (a block freed late, or pending stream events, makes it busy). At the first
// mismatch the rest of the iteration goes to the caching path -- the plan never fails an allocation -- and
// the next marker plans again from what actually happened. Plans only use the past (online).
// While an iteration runs on the caching path, the arena is idle: once no planned block lives in it and
// the cache would grow past the page budget, its pages go back (plan_release_arena) rather than be held
// beside the cache; the marked loop of bench_planned otherwise peaked at 1.5-1.9 x live while learning.
// After an iteration that followed the plan, the cache gives back what the plan made redundant
// (Note [Trimming after a followed plan]).
// Without markers, iterations are found in the request sequence itself (Note [Detected repetition]).
// With markers, a real trainer's iterations repeat as a multiset but not in order (Note [Reordered
// iterations], planner_match.cpp).

#include <algorithm>

#include "allocator_impl.hpp"
#include "planner.hpp"

namespace memcomm::alloc {

namespace {
// The multiset of (size, stream) keys of a recorded iteration, as one number: equal for two
// iterations that make the same allocations in any order.
std::uint64_t signature(const std::vector<RecordedAlloc>& rec) {
  std::uint64_t sum = 0;
  for (const RecordedAlloc& r : rec) {
    std::uint64_t h = (std::uint64_t(r.size) * 0x9E3779B97F4A7C15ull) ^ (std::uint64_t(r.stream) + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    sum += h * 0xBF58476D1CE4E5B9ull;
  }
  return sum ^ (std::uint64_t(rec.size()) << 1) ^ 1;  // never 0, the value of "no iteration yet"
}
}  // namespace

std::size_t pack_lifetimes(const std::vector<RecordedAlloc>& rec, std::size_t page, std::vector<PlanItem>& out) {
  out.assign(rec.size(), PlanItem{0, 0, 0, false});
  if (rec.empty()) return 0;
  const StreamId stream = rec.front().stream;  // one stream: cross-stream reuse would need events
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < rec.size(); ++i) {
    out[i].size = rec[i].size;
    out[i].stream = rec[i].stream;
    if (rec[i].died != kNever && rec[i].stream == stream) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return rec[a].size != rec[b].size ? rec[a].size > rec[b].size : rec[a].born < rec[b].born;
  });
  struct Placed {
    std::uint64_t born, died;
    std::size_t lo, hi;
  };
  std::vector<Placed> placed;
  std::vector<std::pair<std::size_t, std::size_t>> busy;
  std::size_t arena = 0;
  for (std::size_t i : order) {
    const RecordedAlloc& r = rec[i];
    busy.clear();
    for (const Placed& p : placed)
      if (p.born < r.died && r.born < p.died) busy.emplace_back(p.lo, p.hi);
    std::sort(busy.begin(), busy.end());
    // Best fit among the gaps between ranges in use at the same time; else the lowest free top.
    std::size_t best = std::size_t(-1), best_gap = std::size_t(-1), cursor = 0;
    for (auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= r.size && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    if (best == std::size_t(-1)) best = cursor;
    out[i].offset = best;
    out[i].in_arena = true;
    placed.push_back({r.born, r.died, best, best + r.size});
    arena = std::max(arena, best + r.size);
  }
  return (arena + page - 1) / page * page;
}

std::size_t pack_window(const std::vector<RecordedAlloc>& rec, std::size_t first, std::size_t count,
                        std::uint64_t end, std::size_t page, std::vector<PlanItem>& out) {
  std::vector<RecordedAlloc> w(rec.begin() + std::ptrdiff_t(first), rec.begin() + std::ptrdiff_t(first + count));
  for (RecordedAlloc& r : w)
    if (r.died != kNever && r.died >= end) r.died = kNever;
  return pack_lifetimes(w, page, out);
}

void CachingAllocator::Impl::plan_record_alloc(Block* b) {
  PlanImpl& p = *plan;
  const bool detecting = config.detect_repetition && !p.markers;
  constexpr std::size_t kMaxRecorded = 1u << 20;  // with markers far apart, stop recording rather than grow forever
  p.iter_cache_peak = std::max(p.iter_cache_peak, stats.allocated_bytes.current - p.arena_allocated);
  if (detecting) plan_trim();
  else if (p.rec.size() >= kMaxRecorded) return;
  // The rounded request, not the block: a caching-path block may carry an unsplit remainder.
  p.rec.push_back({round_size(b->requested), b->stream, p.clock++, kNever});
  p.live_before.push_back(p.live_now);
  p.live_now += std::int64_t(b->requested);
  b->plan_seq = p.rec_base + p.rec.size() - 1;
  if (detecting) plan_detect();
}

void CachingAllocator::Impl::plan_record_free(Block* b) {
  PlanImpl& p = *plan;
  if (b->planned) p.arena_allocated -= std::int64_t(b->size);
  if (b->plan_seq == ~std::uint64_t(0)) return;  // allocated before planned mode saw it
  p.live_now -= std::int64_t(b->requested);
  if (b->plan_seq >= p.rec_base && b->plan_seq - p.rec_base < p.rec.size())
    p.rec[b->plan_seq - p.rec_base].died = p.clock++;
}

// A planned block whose events have completed: its arena range is free again.
bool CachingAllocator::Impl::plan_free(Block* b) {
  PlanImpl& p = *plan;
  p.live.erase(b->addr - p.arena->base);
  p.arena_blocks--;
  stats.active.decrease(1);
  stats.active_bytes.decrease(std::int64_t(b->size));
  emit(EventKind::FreeCompleted, b->addr, b->size, 0, b->stream);
  delete_block(b);
  return true;
}

// Note [Trimming after a followed plan]
// While iterations follow the plan, the arena holds every allocation that dies within the iteration,
// and the cache only what outlives it (parameters, optimizer state, blocks the plan did not cover).
// The pages the cache had mapped for the learning iterations are then redundant, but lazy release
// (Note [Lazy page release]) gives pages back only when growth needs room, so they would stay mapped
// beside the arena: a marked training loop sat at 1.5-1.9 x its peak allocated bytes from iteration 3
// on (bench_planned). So after each iteration that followed the plan from start to end, the cache
// gives back free pages (oldest first) until reserved bytes are at most the arena plus the cache's own
// peak of that iteration; pages that live blocks share stay. The next iteration follows the same plan
// and fits, so the trim costs no map calls; one that leaves the plan grows the cache again as usual.
// Only marked iterations are trimmed. A detected period is often one layer or micro-step of the real
// step (9 to 126 allocations on the shared snapshots), and the cache's pages serve the rest of the step:
// trimming after detected periods cost 1.1 to 1.7 x the map calls on 7 of the 12 snapshots (octree-nca
// 61 -> 88, wedsonlin 167 -> 235) for a lower second half on one (wedsonlin 2.09 -> 1.15 x live).
std::size_t CachingAllocator::Impl::trim_target() const {
  const PlanImpl& p = *plan;
  return (p.arena ? p.arena->mapped_bytes : 0) + std::size_t(std::max<std::int64_t>(p.iter_cache_peak, 0)) +
         p.trim_extra;
}

void CachingAllocator::Impl::plan_count_cache_map(std::size_t bytes) { plan->cache_mapped += bytes; }

void CachingAllocator::Impl::plan_step() {
  std::size_t trim_to = 0;  // reserved bytes to trim the cache to (Note [Trimming after a followed plan])
  {
    AllocatorLock lock(mu);
    PlanImpl& p = *plan;
    if (!p.markers) {  // markers rule from now on: forget what detection planned
      p.markers = true;
      p.active = false;  // the arena stays mapped for the first marked plan
      p.pending_items.clear();
      p.next_start = kNever;
      p.period = 0;
      p.windows.clear();
      if (p.rec_base != 0) {  // detection dropped the oldest records: what is left is no iteration
        p.rec_base += p.rec.size();
        p.rec.clear();
        p.live_before.clear();
      }
    }
    const bool followed = p.followed();
    if (followed) {
      p.trim_extra += p.cache_mapped;  // misses needed these pages: trimming them would map them again
      trim_to = trim_target();
    }
    p.cache_mapped = 0;
    p.iter_cache_peak = stats.allocated_bytes.current - p.arena_allocated;
    // Plan only from an iteration that repeated the one before it (Note [Reordered iterations]).
    const std::uint64_t sig = signature(p.rec);
    const bool repeated = sig == p.last_signature;
    p.last_signature = sig;
    if (!followed) {
      // The plan failed this iteration (or was not in force): it is not mapped again, as
      // plan_release_arena queued; the arena's mapped pages stay for the next plan, and its gaps serve
      // the cache meanwhile (Note [Reordered iterations]).
      p.active = false;
      p.pending_items.clear();
    }
    if (!followed && repeated && p.rec.size() >= config.min_plan_allocs) {
      p.pending_arena = pack_lifetimes(p.rec, page, p.pending_items);
      if (p.pending_arena == 0) p.pending_items.clear();
      else p.plans++;
    }
    p.rec_base += p.rec.size();
    p.rec.clear();
    p.live_before.clear();
    p.clock = 0;
    p.begin_iteration();
    if (p.pending_items.empty()) {
      if (trim_to == 0 || std::size_t(stats.reserved_bytes.current) <= trim_to) return;
    }
  }
  if (trim_to) release_free(trim_to, 0, false);
  else plan_map_pending();
}

Segment* CachingAllocator::Impl::reserve_arena() {
  std::size_t vsize = config.virtual_size;
  if (vsize == 0) vsize = default_virtual_size();
  vsize = (vsize + page - 1) / page * page;
  void* base = source->reserve(vsize);
  AllocatorLock lock(mu);
  auto seg = std::make_unique<Segment>();
  seg->base = reinterpret_cast<std::uintptr_t>(base);
  seg->size = vsize;
  seg->pool = pool_for(0, false);
  seg->expandable = true;
  seg->arena = true;
  plan->arena = seg.get();
  segments.push_back(std::move(seg));
  stats.segment.increase(1);
  emit(EventKind::SegmentAlloc, plan->arena->base, vsize, 0, 0, prof::kSegmentVirtualRange);
  return plan->arena;
}

void CachingAllocator::Impl::plan_map_pending() {
  std::size_t want = 0;  // arena bytes the new plan needs mapped
  Segment* arena = nullptr;
  auto activate = [](PlanImpl& p) {
    p.items.swap(p.pending_items);
    p.pending_items.clear();
    p.arena_size = p.pending_arena;
    p.active = true;
    p.taken.assign(p.items.size(), 0);  // the iteration that activates the plan begins now
    p.matched = 0;
    p.next_match = 0;
    p.trim_extra = 0;
  };
  {
    AllocatorLock lock(mu);
    PlanImpl& p = *plan;
    if (p.pending_items.empty() || p.mapping) return;  // nothing to map, or another thread maps it
    if (p.arena && p.arena->mapped_bytes >= p.pending_arena) {
      activate(p);
      return;
    }
    want = p.pending_arena;
    arena = p.arena;
    p.mapping = true;
  }
  struct Done {  // clears PlanImpl::mapping on every way out (it is destroyed after any lock below)
    Impl* m;
    ~Done() {
      AllocatorLock lock(m->mu);
      m->plan->mapping = false;
    }
  } done{this};
  // Reserve the arena once, then map what it lacks, after giving back pages the plan makes redundant.
  if (!arena) arena = reserve_arena();
  std::size_t grow_by;
  Releases rel;
  {
    AllocatorLock lock(mu);
    flush_recent();
    grow_by = want - arena->mapped_bytes;
    const auto budget_now = std::size_t(budget.plain(allocated_high_water));
    const auto reserved = std::size_t(stats.reserved_bytes.current);
    const auto peak = std::size_t(stats.reserved_bytes.peak);
    // The cache's free pages are given back for the arena, and a plan that does not fit beside what
    // stays is dropped: a detected plan must not raise the peak reserved bytes, nor a marked one cross
    // both the page budget and that peak (Note [Reordered iterations]).
    std::size_t limit = plan->markers ? std::max(budget_now, peak) : std::min(budget_now, peak);
    if (cap) limit = std::min(limit, cap);
    if (reserved + grow_by > limit) pick_releases(reserved + grow_by - limit, 0, rel);
    if (reserved + grow_by - rel.bytes > limit) {  // the cap, the budget (or a detected plan's peak): keep caching
      unpick_releases(rel);
      plan->pending_items.clear();
      return;
    }
  }
  run_releases(rel);
  const bool ok = source->map(reinterpret_cast<void*>(arena->base + arena->mapped_bytes), grow_by);
  AllocatorLock lock(mu);
  finish_releases(rel, false);
  PlanImpl& p = *plan;
  if (!ok) {
    p.pending_items.clear();
    return;
  }
  emit(EventKind::SegmentMap, arena->base + arena->mapped_bytes, grow_by, 0, 0);
  arena->mapped_bytes += grow_by;
  count_backed(std::int64_t(grow_by));
  stats.num_device_map++;
  activate(p);
}

}  // namespace memcomm::alloc

namespace memcomm::alloc {

bool CachingAllocator::Impl::plan_arena_in_the_way(std::size_t size) {
  AllocatorLock lock(mu);
  const PlanImpl& p = *plan;
  // Only while nothing more is planned in this iteration: it left the plan, or every item is matched.
  if (!(p.deviated || p.matched == p.items.size()) || !p.arena || p.arena_keep(page) >= p.arena->mapped_bytes ||
      p.mapping)
    return false;
  const std::int64_t hw = std::max<std::int64_t>(allocated_high_water, stats.allocated_bytes.current + std::int64_t(size));
  return double(stats.reserved_bytes.current) + double(size) > budget.plain(hw);
}

// empty_cache(), or an iteration that left the plan and needs the arena's pages for the cache
// (Note [Planned mode]): the arena's pages above its highest live planned block go back (all of them
// when none lives: an iteration that left the plan in a new phase, an evaluation, must not hold them
// beside the cache's growth); the plan is kept and its arena is mapped again at the next step_marker()
// or detected iteration.
void CachingAllocator::Impl::plan_release_arena() {
  std::uintptr_t base;
  std::size_t bytes;
  {
    AllocatorLock lock(mu);
    PlanImpl& p = *plan;
    if (!p.arena || p.mapping) return;
    const std::size_t keep = p.arena_keep(page);
    if (keep >= p.arena->mapped_bytes) return;
    base = p.arena->base + keep;
    bytes = p.arena->mapped_bytes - keep;
    if (p.active && p.pending_items.empty()) {
      p.pending_items = p.items;
      p.pending_arena = p.arena_size;
    }
    p.active = false;
    p.arena->mapped_bytes = keep;  // nothing can be planned into it meanwhile: the plan is inactive
  }
  source->unmap(reinterpret_cast<void*>(base), bytes);
  AllocatorLock lock(mu);
  count_backed(-std::int64_t(bytes));
  stats.num_device_unmap++;
  emit(EventKind::SegmentUnmap, base, bytes, 0, 0);
}

}  // namespace memcomm::alloc
