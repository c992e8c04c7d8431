// Planned mode's private state (Note [Planned mode] in planner.cpp).
//
// Contract with the caching path: planned mode is on exactly when CachingAllocator::Impl::plan is set
// (by the constructor, never changed). The caching path consults it only through Impl's plan_*
// members, at these points (memory_summary, snapshot and check_invariants also read its state):
//   allocate    plan_iteration_begins (then plan_map_pending without the lock), plan_allocate before
//               the cache, plan_gap_allocate before growth, plan_record_alloc after any hand-out;
//   deallocate  plan_record_free, and plan_free for a planned block (at once, or when its stream
//               events complete: process_events_locked);
//   growth      plan_arena_in_the_way / plan_release_arena before it, plan_count_cache_map per map;
//   step_marker plan_step; empty_cache plan_release_arena.
// Planned mode never fails an allocation: whatever it cannot serve goes to the caching path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "memcomm/allocator/stats.hpp"
#include "memcomm/allocator/stream.hpp"

namespace memcomm::alloc {

struct Segment;

// One allocation of a recorded iteration.
struct RecordedAlloc {
  std::size_t size;        // rounded bytes
  StreamId stream;         // stream it was made on
  std::uint64_t born;      // position in the iteration's event sequence
  std::uint64_t died;      // position of its free; kNever if it outlived the iteration
};

// What the plan says about the i-th allocation of an iteration.
struct PlanItem {
  std::size_t size;        // rounded bytes expected
  StreamId stream;         // stream expected
  std::size_t offset;      // offset in the arena
  bool in_arena;           // false: it outlives the iteration, so the caching path serves it
};

inline constexpr std::uint64_t kNever = ~std::uint64_t(0);
inline constexpr std::size_t kNoGap = ~std::size_t(0);

// Lifetime-aware packing: offsets such that allocations alive at the same time never overlap, by
// greedy best fit in decreasing size. Returns the arena size. Items with died == kNever get no offset.
std::size_t pack_lifetimes(const std::vector<RecordedAlloc>& rec, std::size_t page, std::vector<PlanItem>& out);

// Lifetime-aware packing of the allocations rec[first, first + count), as one iteration that ended at
// event `end`: frees at or after it count as never (those allocations stay on the caching path).
std::size_t pack_window(const std::vector<RecordedAlloc>& rec, std::size_t first, std::size_t count,
                        std::uint64_t end, std::size_t page, std::vector<PlanItem>& out);

struct PlanImpl {
  // --- the iteration being recorded (with markers), or the recent history (detection) ---
  std::vector<RecordedAlloc> rec;        // allocations so far, in order
  std::uint64_t rec_base = 0;            // number of rec[0] among all allocations (Block::plan_seq)
  std::uint64_t clock = 0;               // events so far (reset at each marker)
  // --- detected repetition (Note [Detected repetition], repetition.cpp) ---
  bool markers = false;                  // step_marker() was called: markers rule, detection is off
  std::vector<std::int64_t> live_before; // live requested bytes just before each rec entry
  std::int64_t live_now = 0;             // live requested bytes now (allocations seen by the plan)
  std::unordered_map<std::uint64_t, std::uint64_t> windows;  // hash of the keys ending at an allocation -> its number
  std::uint64_t period = 0;              // candidate period in allocations (0 = none)
  std::uint64_t run = 0;                 // allocations in a row equal to the one `period` before
  std::uint64_t next_start = kNever;     // number of the allocation that begins the next planned iteration
  std::uint64_t detections = 0;          // periods confirmed so far
  std::uint64_t misses = 0;              // iterations that left the plan (each makes detection more cautious)
  // --- the plan being followed ---
  std::vector<PlanItem> items;           // expected sequence
  std::size_t pos = 0;                   // first item not yet matched in this iteration
  std::vector<std::uint8_t> taken;       // per item: matched in this iteration (Note [Reordered iterations])
  std::size_t matched = 0;               // items matched in this iteration
  std::size_t next_match = 0;            // one past the highest item matched in this iteration
  std::size_t iter_misses = 0;           // allocations of this iteration the plan could not serve
  bool matched_outside = false;          // the allocation being served matched an item that outlives the
                                         // iteration (!in_arena): it must not go into an arena gap
  bool active = false;                   // a plan exists and its arena is mapped
  bool deviated = false;                 // this iteration left the plan; caching path until the next marker
  std::size_t arena_size = 0;            // bytes the plan needs
  std::size_t pending_arena = 0;         // arena size of a plan waiting for its pages
  std::vector<PlanItem> pending_items;   // that plan
  bool mapping = false;                  // a thread is mapping the arena for the pending plan (unlocked)
  Segment* arena = nullptr;              // the arena's expandable range (mapped prefix)
  std::map<std::size_t, std::size_t> live;  // arena offsets in use: offset -> end
  std::uint64_t arena_blocks = 0;        // planned blocks alive
  std::int64_t arena_allocated = 0;      // bytes of live planned blocks (also in allocated_bytes)
  std::int64_t iter_cache_peak = 0;      // largest allocated bytes outside the arena in this iteration
  std::size_t cache_mapped = 0;          // bytes the caching path mapped since the last marker
  std::size_t trim_extra = 0;            // bytes the caching path mapped in followed iterations of this plan:
                                         // trimming leaves them (Note [Trimming after a followed plan])
  std::uint64_t plans = 0;               // marked plans packed so far
  std::uint64_t last_signature = 0;      // order-free signature of the last marked iteration (Note [Reordered iterations])

  // The lowest free gap of the mapped arena that holds `size` bytes, or kNoGap.
  std::size_t arena_gap(std::size_t size) const {
    std::size_t cursor = 0;
    for (auto& [lo, hi] : live) {
      if (lo >= cursor + size) return cursor;
      cursor = hi > cursor ? hi : cursor;
    }
    return cursor + size <= arena->mapped_bytes ? cursor : kNoGap;
  }
  // Mapped arena bytes that planned blocks still need: up to the page after the highest live one.
  std::size_t arena_keep(std::size_t page) const {
    if (live.empty()) return 0;
    return (live.rbegin()->second + page - 1) / page * page;
  }
  // A new iteration begins: nothing matched yet.
  void begin_iteration() {
    pos = 0;
    deviated = false;
    taken.assign(items.size(), 0);
    matched = 0;
    next_match = 0;
    iter_misses = 0;
  }
  // The iteration that just ended matched every item of the plan and did not leave it.
  bool followed() const { return active && !deviated && matched == items.size(); }

  // Arena free space is not part of the caching free sets; only the plan's own figures are added.
  void summarize(MemorySummary& s, std::size_t arena_mapped) const {
    if (!active) return;
    s.planned_arena_bytes = arena_mapped;
    s.planned_iteration_allocs = items.size();
    for (const PlanItem& it : items) s.planned_in_arena += it.in_arena ? 1 : 0;
  }
};

}  // namespace memcomm::alloc
