// Growing what the allocator holds when the free sets have nothing that fits: the retry and OOM
// driver, the page budget, and PyTorch's whole segments for sources that cannot map (expandable
// segments: expandable.cpp; giving memory back: release.cpp).
//
// Note [Lazy page release]
// Mapped bytes are allowed up to budget = high-water allocated bytes x (1 + release_slack) + a floor
// (2% of the high water, within [page, release_floor]: a fixed 4 MiB would be 4% of a 100 MiB arena).
// Growth that would cross it first unmaps free pages elsewhere, in the order of Note [Release order]
// (release.cpp), from as few free blocks as cover the need, each giving all its interior pages (Note
// [A block gives back all its pages], release.cpp).
// Thus memory sits near live bytes at every peak (what eager release buys) while steady-state
// iterations, which stay under their own high water, make no source calls at all (what eager release
// loses). PageBudget (page_budget.hpp) holds the formula; growth asks it before mapping and does the
// releasing itself.
//
// Note [Last resort: the other size class]
// Small and large requests live in separate pools (Note [Pools and size classes]), so under a cap a
// request can fail while the other pool holds a free block big enough: a 1.03 MiB request under a
// 7.5 MiB cap failed with a 1.67 MiB free block in the small pool (3 pages mapped, a 4th over the cap,
// and no whole free page to move). Only after the retry has given back everything it can, the request
// takes a fitting free block of the same stream's other pool. The block stays in its pool and segment
// and returns there when freed; the separation is a heuristic against fragmentation, not a rule worth
// an out-of-memory. num_cross_class_allocs counts it. Before that, in a trough at the page budget, a
// small request may borrow a large-pool block rather than trade pages (Note [A small request in a
// trough borrows a large hole], expandable.cpp).
//
// Note [Garbage collection]
// The cap (config.capacity or the source's) bounds reserved bytes; growth that would cross it gives
// back free pages/segments first. With gc_threshold set, growth that would take reserved bytes above
// gc_threshold x cap first gives back free memory unused for gc_min_age operations. If growth still
// fails, grow() waits for pending events, gives back everything free and retries once.
//
// Note [Feasibility is monotonic in the cap]
// A request sequence that runs under cap C should run under every larger cap. Growth maps more than
// the request's own pages: map-ahead takes a share of the page budget's headroom, and every growth
// maps at least a small or medium segment's worth (Note [Map ahead]). The budget (release_slack of the
// high water, plus a floor of at least one page) is not bounded by the cap, so near the cap those
// extra pages took the growth over it; make_room then looked for free whole pages to give back, found
// none (the free bytes sat in pages shared with live blocks), and the request failed although its own
// pages fitted.
// Giving back everything free and retrying did not help: each page given back raised the budget's
// headroom by as much, so map-ahead asked for it again. Whether it bit depended on the layout a run had
// reached, which depends on the cap, so feasibility was not monotonic. wedsonlin (pytorch-snapshots)
// ran under 23136 MiB but not under 23174-23300 MiB: a 256 MiB request, 23096 MiB reserved with it,
// and about 690 MiB of map-ahead on top. On a small arena the floor alone is a page, so a request one
// page below the cap failed the same way.
// So the last try before an out-of-memory (after the retry and the other size class) cuts the window
// back to the request's last page (trim_to_request): the pages the retry moved out of other pools and
// streams serve the request itself, and map-ahead, an optimisation of calls, is never the reason a
// request fails. Runs that fitted before are unchanged, decision for decision: this path runs only
// where they used to fail. What is guaranteed is that local rule: a request fails only when its own
// pages do not fit under the cap after every free page of every pool and stream has been given back.
// Monotonicity follows from it while two caps lead to the same layout, not always: a larger cap maps a
// page more ahead, and the layouts part (1 of 600 big-tensor synthetic traces: fits under 784 MiB, not
// 786 MiB, where a later 64 MiB request's pages do not fit). tests/allocator/test_cap_monotonic.cpp
// checks the rule at every out-of-memory of its cap sweeps, and monotonicity on memcomm-train's traces,
// shared snapshots and synthetic training traces.

#include <algorithm>
#include <string>
#include <utility>

#include <memcomm/common/bytes.hpp>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

// `whole_segment`: the segment a request of `size` takes without expandable segments (0: it maps pages).
std::string format_oom(std::size_t size, std::size_t requested, const MemorySource& src, std::size_t cap,
                       std::uint64_t reserved, std::uint64_t allocated, std::uint64_t largest_free,
                       std::size_t whole_segment);


std::size_t CachingAllocator::Impl::largest_free_locked() const {
  std::size_t best = 0;
  for (auto& p : pools)
    if (!p->free.empty()) best = std::max(best, (*p->free.rbegin())->size);
  return best;
}

// What free block `b` can give back: its interior pages in an expandable segment, else its whole
// segment when it is the segment's only block.
std::size_t CachingAllocator::Impl::releasable(const Block* b) const {
  if (!b->segment->expandable) return (!b->prev && !b->next) ? b->segment->size : 0;
  const std::uintptr_t lo = page_up(b->addr, page), hi = page_down(b->addr + b->size, page);
  return hi > lo ? hi - lo : 0;
}

Block* CachingAllocator::Impl::grow(Pool* pool, std::size_t size, std::size_t requested) {
  if (config.gc_threshold > 0 && cap > 0) {
    const auto limit = std::size_t(config.gc_threshold * double(cap));
    std::size_t reserved;
    {
      AllocatorLock lock(mu);
      reserved = std::size_t(stats.reserved_bytes.current);
    }
    if (reserved + size > limit) release_free(limit > size ? limit - size : 0, config.gc_min_age, true);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    Block* b = expandable ? grow_expandable(pool, size, requested) : grow_whole(pool, size, requested);
    if (b) return b;
    if (attempt == 0) {
      {
        AllocatorLock lock(mu);
        synchronize_pending();
        stats.num_alloc_retries++;
      }
      release_free(0, 0, false);
    }
  }
  {
    AllocatorLock lock(mu);
    if (Block* b = find_in_other_class(pool, size)) {  // Note [Last resort: the other size class]
      stats.num_cross_class_allocs++;
      return take_filed(b, size, requested, pool->stream);
    }
  }
  // See Note [Feasibility is monotonic in the cap]: the request's own pages, nothing ahead.
  if (expandable)
    if (Block* b = grow_expandable(pool, size, requested, true)) return b;
  AllocatorLock lock(mu);
  stats.num_ooms++;
  emit(EventKind::Oom, 0, size, requested, pool->stream);
  const auto reserved = std::uint64_t(stats.reserved_bytes.current);
  const auto allocated = std::uint64_t(stats.allocated_bytes.current);
  const std::uint64_t largest = largest_free_locked();
  std::string message = format_oom(size, requested, *source, cap, reserved, allocated, largest,
                                   expandable ? 0 : whole_segment(pool, size));
  if (expandable && pool->expandable && pool->expandable->size < cap)
    message += "; this pool's expandable segment has " + format_bytes(pool->expandable->size, 2) +
               " of address space, all the process could reserve (Note [Address space for a segment])";
  // A cap below the pages a request maps holds nothing of that size: "512 B under a capacity of 1 KiB,
  // 0 B reserved" read as a contradiction (format_oom already names a whole segment's size).
  if (expandable && cap && page_up(size, page) > cap)
    message += "; memory is reserved " + format_bytes(page_up(size, page), 2) +
               " at a time for this request, more than the capacity";
  throw OutOfMemory(std::move(message),
                    requested, reserved, allocated, largest,
                    reserved > 0 ? 1.0 - double(allocated) / double(reserved) : 0.0);
}

// See Note [Feasibility is monotonic in the cap]: claim_window cuts the window's last unmapped piece at
// the end of map-ahead; cut it at the request's last page instead, and put the rest back unmapped.
void CachingAllocator::Impl::trim_to_request(WindowGrowth& g, std::size_t size) {
  const std::uintptr_t end = page_up(g.start + size, page);
  for (Block* x : g.to_map) {
    if (x->addr + x->size <= end) continue;
    Block* rest = split_unmapped(x, end);  // not busy: outside the window
    g.need -= rest->size;
    merge_free(rest);  // with the unmapped block claim_window left after it
  }
}

Pool* CachingAllocator::Impl::other_class(const Pool* pool) const {
  for (auto& p : pools)  // pool_for() makes one pool per stream and size class
    if (p->stream == pool->stream && p->small != pool->small) return p.get();
  return nullptr;
}

Block* CachingAllocator::Impl::find_in_other_class(Pool* pool, std::size_t size) {
  Pool* other = other_class(pool);
  return other ? find_free(other, size) : nullptr;
}

// PyTorch's segment sizes: 2 MiB for the small pool, 20 MiB for requests under 10 MiB, else the
// request rounded up to large_round.
std::size_t CachingAllocator::Impl::whole_segment(const Pool* pool, std::size_t size) const {
  std::size_t seg_size;
  if (pool->small) seg_size = config.small_segment;
  else if (size < (10u << 20)) seg_size = config.medium_segment;
  else seg_size = page_up(size, config.large_round);
  return page_up(std::max(seg_size, size), page);
}

Block* CachingAllocator::Impl::grow_whole(Pool* pool, std::size_t size, std::size_t requested) {
  std::size_t seg_size;
  Releases rel;
  {
    AllocatorLock lock(mu);
    flush_recent();
    if (Block* b = find_free(pool, size)) {
      return take_filed(b, size, requested, pool->stream);
    }
    seg_size = whole_segment(pool, size);
    const auto reserved = std::size_t(stats.reserved_bytes.current);
    if (cap && reserved + seg_size > cap) {
      pick_releases(reserved + seg_size - cap, 0, rel);
      if (reserved + seg_size - rel.bytes > cap) {
        unpick_releases(rel);
        return nullptr;
      }
    }
  }
  run_releases(rel);
  {
    AllocatorLock lock(mu);
    finish_releases(rel, false);
  }
  void* p = nullptr;
  {
    SourceCallScope in_flight;
    p = source->allocate(seg_size);
  }
  if (!p) return nullptr;
  AllocatorLock lock(mu);
  Segment* seg = add_segment(reinterpret_cast<std::uintptr_t>(p), seg_size, pool, false);
  seg->mapped_bytes = seg_size;
  Block* b = seg->head;
  b->last_used = tick;
  pool->segments.push_back(seg);
  if (seg_size >= config.max_split_size) stats.oversize_segments.increase(1);
  count_backed(std::int64_t(seg_size));
  stats.num_device_alloc++;
  emit(EventKind::SegmentAlloc, b->addr, seg_size, 0, pool->stream);
  return take(b, size, requested, pool->stream);
}

}  // namespace memcomm::alloc
