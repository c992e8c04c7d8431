// snapshot() and check_invariants(): the allocator's state laid out for tests and tools.
// check_invariants walks every segment's block list (check_segment: tiling, flags, mapped pages),
// tallying what the blocks add up to (and checking the index of unmapped blocks), and compares the
// tallies with the free sets, the live table, the stats and the source (check_totals).

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  Impl& m = *impl_;
  AllocatorLock lock(m.mu);
  std::vector<SegmentInfo> out;
  for (auto& seg : m.segments) {
    SegmentInfo s;
    s.base = seg->base;
    s.size = seg->size;
    s.mapped_bytes = seg->mapped_bytes;
    s.stream = seg->pool->stream;
    s.expandable = seg->expandable;
    s.small_pool = seg->pool->small;
    for (Block* b = seg->head; b; b = b->next)
      s.blocks.push_back({b->addr, b->size, b->requested, b->allocated, b->pending_events > 0, b->mapped});
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

using Impl = CachingAllocator::Impl;

[[noreturn]] void fail(const std::string& what) { throw std::logic_error("allocator invariant broken: " + what); }

// What the blocks add up to; check_totals compares it with the stats, the tables and the source.
struct Tally {
  std::int64_t allocated = 0, requested = 0, active = 0, reserved = 0, n_alloc = 0, n_split = 0, split_bytes = 0;
  std::size_t free_in_sets = 0, live_blocks = 0, parked = 0, releasable = 0, releasable_blocks = 0;
  void count_split(const Block* b) {
    if (!b->counted_split) return;
    ++n_split;
    split_bytes += std::int64_t(b->size);
  }
  void count_allocated(const Block* b) {
    allocated += std::int64_t(b->size);
    requested += std::int64_t(b->requested);
    ++n_alloc;
    ++live_blocks;
  }
};

// A block's place in its segment and the flags it may carry together.
void check_block_shape(const Impl& m, const Segment& seg, const Block* b, std::uintptr_t expect) {
  if (b->addr != expect) fail("blocks do not tile their segment (gap or overlap)");
  if (b->size == 0 || b->size % m.config.min_block) fail("block size is not a positive multiple of min_block");
  if (b->segment != &seg) fail("block points at the wrong segment");
  if (b->next && b->next->prev != b) fail("broken block links");
  if (b->busy) fail("a busy block outside a source call");
  // See Note [Cross-stream reuse]: only free, mapped, event-free blocks may be idle; fresh ones were never handed out.
  if (b->idle && (b->allocated || b->pending_events || !b->mapped)) fail("an idle block that is not free and mapped");
  if (b->fresh && (b->allocated || b->pending_events)) fail("a fresh block in use");
}

void check_unmapped(const Segment& seg, const Block* b, bool in_set, std::size_t page) {
  if (!seg.expandable) fail("unmapped block in a whole segment");
  if (b->allocated || b->pending_events) fail("unmapped block in use");
  if (b->addr % page || b->size % page) fail("unmapped block not page-aligned");
  if (in_set) fail("unmapped block in a free set");
  // Segment::unmapped holds it (Note [Finding a window's free blocks]).
  if (!seg.unmapped.count(const_cast<Block*>(b))) fail("unmapped block missing from its segment's index");
  if (b->next && !b->next->mapped) fail("two adjacent unmapped blocks not merged");
}

// A filed block's count of releasable bytes and its place in the list of blocks that have any
// (Note [Counting releasable bytes]).
void check_releasable(const Impl& m, const Block* b, Tally& t) REQUIRES(m.mu) {
  if (b->releasable_bytes != m.releasable(b)) fail("a free block's releasable bytes are out of date");
  if (b->releasable_bytes == 0) return;
  t.releasable += b->releasable_bytes;
  ++t.releasable_blocks;
  if (b->releasable_slot >= m.releasable_blocks.size() || m.releasable_blocks[b->releasable_slot] != b)
    fail("a releasable block missing from the releasable list");
}

// A mapped block, counted by what it is: handed out, waiting for events, parked, or free in its set.
void tally_mapped(Impl& m, const Segment& seg, const Block* b, bool in_set, Tally& t) REQUIRES(m.mu) {
  if (!in_set && b->releasable_bytes) fail("a block out of the free sets still counted as releasable");
  if (b->allocated) {
    Block* const* found = m.live.find(b->addr);
    if (!found || *found != b) fail("allocated block missing from the live table");
    if (b->requested > b->size) fail("requested bytes exceed block size");
    if (b->stream != seg.pool->stream && !m.multi_stream) fail("a borrowed block with one stream");
    t.count_allocated(b);
    t.active += std::int64_t(b->size);
    if (in_set) fail("allocated block in a free set");
  } else if (b->pending_events) {
    t.active += std::int64_t(b->size);
    if (in_set) fail("pending block in a free set");
  } else if (b->in_recent) {
    if (in_set) fail("parked block also in a free set");
    const Pool* pool = seg.pool;
    if (!pool->small) fail("large block parked (Note [Recent frees]: only small blocks are)");
    if (std::find(pool->recent, pool->recent + pool->n_recent, b) == pool->recent + pool->n_recent)
      fail("parked block missing from its pool's recent list");
    ++t.parked;
    t.count_split(b);
  } else {
    if (!in_set) fail("free mapped block missing from its free set");
    ++t.free_in_sets;
    if (b->next && b->next->mapped && !b->next->allocated && !b->next->pending_events && !b->next->in_recent)
      fail("two adjacent free blocks not merged");
    t.count_split(b);
    check_releasable(m, b, t);
  }
}

// One segment's blocks: they tile it, and an expandable segment's mapped bytes are the pages they touch.
void check_segment(Impl& m, const Segment& seg, Tally& t) REQUIRES(m.mu) {
  const std::size_t page = m.page;
  if (!seg.head || seg.head->addr != seg.base) fail("segment's first block is not at its base");
  std::uintptr_t expect = seg.base;
  std::size_t mapped_pages_bytes = 0;
  std::uintptr_t last_page_end = 0;
  std::size_t unmapped_blocks = 0;
  for (const Block* b = seg.head; b; b = b->next) {
    check_block_shape(m, seg, b, expect);
    expect = b->addr + b->size;
    const bool in_set = seg.pool->free.count(const_cast<Block*>(b)) != 0;
    if (in_set != b->filed || (in_set && *b->free_pos != b)) fail("a block's place in its free set is out of date");
    if (!b->mapped) {
      check_unmapped(seg, b, in_set, page);
      ++unmapped_blocks;
      continue;
    }
    // Pages this mapped block touches, counted once where neighbours share them.
    std::uintptr_t lo = page_down(b->addr, page);
    const std::uintptr_t hi = page_up(b->addr + b->size, page);
    if (lo < last_page_end) lo = last_page_end;
    if (hi > lo) mapped_pages_bytes += hi - lo;
    last_page_end = std::max(last_page_end, hi);
    tally_mapped(m, seg, b, in_set, t);
  }
  if (expect != seg.base + seg.size) fail("blocks do not cover their segment");
  if (seg.unmapped.size() != unmapped_blocks)
    fail("the unmapped index holds blocks that are not unmapped blocks of its segment");
  if (seg.expandable && mapped_pages_bytes != seg.mapped_bytes)
    fail("mapped pages of blocks (" + std::to_string(mapped_pages_bytes) + ") differ from the segment's mapped bytes (" +
         std::to_string(seg.mapped_bytes) + ")");
  if (!seg.expandable && seg.mapped_bytes != seg.size) fail("whole segment not fully backed");
}

// The tallies against the free sets, the recent lists, the live table, the stats and the source.
void check_totals(const Impl& m, const Tally& t) REQUIRES(m.mu) {
  std::size_t set_total = 0, recent_total = 0;
  for (auto& p : m.pools) {
    set_total += p->free.size();
    recent_total += p->n_recent;
    // Keys change in place (Note [Re-keying in place]): the set must still be in best-fit order.
    if (std::adjacent_find(p->free.begin(), p->free.end(), [](const Block* a, const Block* b) {
          return !BlockBySize{}(a, b);
        }) != p->free.end())
      fail("a free set is out of (size, address) order");
  }
  if (recent_total != t.parked) fail("recent lists hold blocks that are not parked free blocks");
  if (set_total != t.free_in_sets) fail("free sets hold blocks that are not free blocks of any segment");
  if (m.releasable_total != t.releasable || m.releasable_blocks.size() != t.releasable_blocks)
    fail("the releasable count disagrees with the free blocks");
  if (t.live_blocks != m.live.size())
    fail("live table holds " + std::to_string(m.live.size()) + " blocks but " + std::to_string(t.live_blocks) +
         " are allocated");
  const DeviceStats& s = m.stats;
  if (s.allocated_bytes.current != t.allocated) fail("allocated_bytes disagrees with the blocks");
  if (s.requested_bytes.current != t.requested) fail("requested_bytes disagrees with the blocks");
  if (s.active_bytes.current != t.active) fail("active_bytes disagrees with the blocks");
  if (s.allocation.current != t.n_alloc) fail("allocation count disagrees with the blocks");
  if (s.reserved_bytes.current != t.reserved) fail("reserved_bytes disagrees with the segments");
  if (s.inactive_split.current != t.n_split || s.inactive_split_bytes.current != t.split_bytes)
    fail("inactive_split disagrees with the free blocks");
  const SourceCounters c = m.source->counters();
  if (std::int64_t(c.backed_bytes) != t.reserved) fail("the source backs a different number of bytes than reserved");
}

}  // namespace

void CachingAllocator::check_invariants() const {
  Impl& m = *impl_;
  AllocatorLock lock(m.mu);
  Tally t;
  std::map<std::uintptr_t, std::uintptr_t> ranges;  // every segment, to check they do not overlap
  for (auto& seg : m.segments) {
    if (!ranges.emplace(seg->base, seg->base + seg->size).second) fail("two segments share a base");
    t.reserved += std::int64_t(seg->mapped_bytes);
    check_segment(m, *seg, t);
  }
  std::uintptr_t prev_end = 0;
  for (auto& [lo, hi] : ranges) {
    if (lo < prev_end) fail("segments overlap");
    prev_end = hi;
  }
  check_totals(m, t);
}

}  // namespace memcomm::alloc
