// Growing and shrinking what the allocator holds: the slow path of CachingAllocator.
//
// Note [Expandable segments]
// Each pool reserves one virtual range and maps pages into it on demand. Its blocks tile the range;
// a block is either mapped (its pages, including pages it shares with neighbours, are backed) or
// unmapped (page-aligned, free, backed by nothing). Free mapped blocks are in the pool's free set;
// unmapped ones are found by walking the segment, which happens only on this slow path.
// When best fit finds nothing, a window for the request is chosen among runs of adjacent free blocks,
// starting at the start or ending at the end of one of the run's blocks, so that it needs the fewest
// new bytes mapped, then the fewest map calls, then the smallest run. Its unmapped pieces are mapped
// (one call per contiguous piece), the window becomes one block and is split as usual. Placing a
// request across a hole that earlier release left is what lets freed pages come back without
// fragmentation: the virtual range is the only thing that fragments, and it is plentiful.
//
// Note [Lazy page release]
// Mapped bytes are allowed up to budget = high-water allocated bytes x (1 + release_slack) + a floor
// (2% of the high water, within [page, release_floor]: a fixed 4 MiB would be 4% of a 100 MiB arena).
// Growth that would cross it first unmaps free pages elsewhere, oldest first and only as many as needed,
// taking them from the top of each free block's interior pages. Thus memory sits near live bytes at
// every peak (what eager release buys) while steady-state iterations, which stay under their own high
// water, make no source calls at all (what eager release loses). At a segment's end a little more than
// needed is mapped (map_ahead x reserved, within the budget) so growth takes few calls.
//
// Note [Garbage collection]
// The cap (config.capacity or the source's) bounds reserved bytes; growth that would cross it gives
// back free pages/segments first. With gc_threshold set, growth that would take reserved bytes above
// gc_threshold x cap first gives back free memory unused for gc_min_age operations. If growth still
// fails, grow() waits for pending events, gives back everything free and retries once.

#include <algorithm>
#include <string>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

std::string format_oom(std::size_t size, std::size_t requested, const MemorySource& src, std::size_t cap,
                       std::uint64_t reserved, std::uint64_t allocated, std::uint64_t largest_free);


std::size_t CachingAllocator::Impl::largest_free_locked() const {
  std::size_t best = 0;
  for (auto& p : pools)
    if (!p->free.empty()) best = std::max(best, (*p->free.rbegin())->size);
  return best;
}

// Bytes pick_releases(everything) would give back now: interior pages of free expandable blocks and
// free whole segments.
std::size_t CachingAllocator::Impl::releasable_locked() const {
  std::size_t bytes = 0;
  for (auto& p : pools)
    for (Block* b : p->free) {
      if (!b->segment->expandable) bytes += (!b->prev && !b->next) ? b->size : 0;
      else if (page_down(b->addr + b->size, page) > page_up(b->addr, page))
        bytes += page_down(b->addr + b->size, page) - page_up(b->addr, page);
    }
  return bytes;
}

Block* CachingAllocator::Impl::grow(Pool* pool, std::size_t size, std::size_t requested) {
  if (config.gc_threshold > 0 && cap > 0) {
    const auto limit = std::size_t(config.gc_threshold * double(cap));
    std::size_t reserved;
    {
      std::lock_guard<std::mutex> lock(mu);
      reserved = std::size_t(stats.reserved_bytes.current);
    }
    if (reserved + size > limit) release_free(limit > size ? limit - size : 0, config.gc_min_age, true);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    Block* b = expandable ? grow_expandable(pool, size, requested) : grow_whole(pool, size, requested);
    if (b) return b;
    if (attempt == 0) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!pending.empty()) {
          for (PendingFree& p : pending)
            for (EventHandle e : p.events) streams->synchronize_event(e);
          stats.num_sync_all_streams++;
          process_events_locked();
        }
        stats.num_alloc_retries++;
      }
      release_free(0, 0, false);
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  stats.num_ooms++;
  emit(EventKind::oom, 0, size, requested, pool->stream);
  const auto reserved = std::uint64_t(stats.reserved_bytes.current);
  const auto allocated = std::uint64_t(stats.allocated_bytes.current);
  const std::uint64_t largest = largest_free_locked();
  throw OutOfMemory(format_oom(size, requested, *source, cap, reserved, allocated, largest), requested, reserved,
                    allocated, largest, reserved > 0 ? 1.0 - double(allocated) / double(reserved) : 0.0);
}

Segment* CachingAllocator::Impl::ensure_expandable(Pool* pool) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (pool->expandable) return pool->expandable;
  }
  std::size_t vsize = config.virtual_size;
  if (vsize == 0) vsize = default_virtual_size();
  vsize = page_up(vsize, page);
  void* base = source->reserve(vsize);
  std::lock_guard<std::mutex> lock(mu);
  if (pool->expandable) {  // another thread won the race
    source->release(base, vsize);
    return pool->expandable;
  }
  auto seg = std::make_unique<Segment>();
  seg->base = reinterpret_cast<std::uintptr_t>(base);
  seg->size = vsize;
  seg->pool = pool;
  seg->expandable = true;
  Block* b = new_block();
  b->addr = seg->base;
  b->size = vsize;
  b->segment = seg.get();
  b->mapped = false;
  seg->head = b;
  pool->expandable = seg.get();
  segments.push_back(std::move(seg));
  stats.segment.increase(1);
  emit(EventKind::segment_alloc, reinterpret_cast<std::uintptr_t>(base), vsize, 0, pool->stream);
  return pool->expandable;
}

namespace {

// A candidate placement inside a run of free blocks.
struct Window {
  std::uintptr_t start = 0;       // first byte of the request
  std::size_t need = 0;           // bytes to map
  std::size_t pieces = 0;         // map calls
  std::size_t run = 0;            // run size (best fit among runs)
  Block* first = nullptr;         // first block overlapping the window
  bool valid = false;
  bool better_than(const Window& o) const {
    if (!o.valid) return true;
    if (need != o.need) return need < o.need;
    if (pieces != o.pieces) return pieces < o.pieces;
    if (run != o.run) return run < o.run;
    return start < o.start;
  }
};

}  // namespace

Block* CachingAllocator::Impl::grow_expandable(Pool* pool, std::size_t size, std::size_t requested) {
  Segment* seg = ensure_expandable(pool);
  std::vector<Block*> window;       // blocks making up the window, address order
  std::vector<Block*> to_map;       // unmapped blocks among them
  Releases rel;
  std::uintptr_t start = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    flush_recent();
    if (Block* b = find_free(pool, size)) {
      free_erase(b);
      return take(b, size, requested);
    }
    // Choose the window (Note [Expandable segments]).
    Window best;
    for (Block* b = seg->head; b;) {
      if (!is_free(b)) {
        b = b->next;
        continue;
      }
      Block* run_first = b;
      std::size_t run = 0;
      Block* run_last = b;
      for (Block* x = b; x && is_free(x); x = x->next) {
        run += x->size;
        run_last = x;
      }
      const std::uintptr_t run_start = run_first->addr, run_end = run_last->addr + run_last->size;
      if (run >= size) {
        auto evaluate = [&](std::uintptr_t w) {
          Window c;
          c.start = w;
          c.run = run;
          c.valid = true;
          for (Block* x = run_first; x != run_last->next; x = x->next) {
            const std::uintptr_t lo = std::max(x->addr, w), hi = std::min(x->addr + x->size, w + size);
            if (lo >= hi) continue;
            if (!c.first) c.first = x;
            if (!x->mapped) {
              c.need += page_up(hi, page) - page_down(lo, page);
              c.pieces++;
            }
          }
          if (c.better_than(best)) best = c;
        };
        for (Block* x = run_first; x != run_last->next; x = x->next) {
          if (x->addr + size <= run_end) evaluate(x->addr);
          const std::uintptr_t end = x->addr + x->size;
          if (end >= run_start + size) evaluate(end - size);
        }
      }
      b = run_last->next;
    }
    if (!best.valid) return nullptr;  // the virtual range is exhausted
    start = best.start;
    const std::uintptr_t end = start + size;
    // Collect the window, cutting unmapped blocks at page boundaries so only needed pages get mapped.
    for (Block* x = best.first; x && x->addr < end; x = x->next) {
      if (!x->mapped) {
        const std::uintptr_t lo = page_down(std::max(x->addr, start), page);
        if (lo > x->addr) {  // keep [x->addr, lo) unmapped outside the window
          Block* r = new_block();
          r->addr = lo;
          r->size = x->addr + x->size - lo;
          r->segment = seg;
          r->mapped = false;
          r->prev = x;
          r->next = x->next;
          if (x->next) x->next->prev = r;
          x->next = r;
          x->size = lo - x->addr;
          continue;  // r is visited next
        }
        std::uintptr_t hi = page_up(std::min(x->addr + x->size, end), page);
        if (hi < x->addr + x->size) {
          // Map ahead inside the unmapped block, within the page budget. For the small pool, free pages
          // that release would give back first do not count: at the budget, after a peak of large
          // blocks, it would otherwise grow a page per call.
          const double budget_d = page_budget(
              std::max<std::int64_t>(allocated_high_water, stats.allocated_bytes.current + std::int64_t(size)));
          std::int64_t held = stats.reserved_bytes.current;
          if (pool->small) held -= std::int64_t(releasable_locked());
          const double room = budget_d - double(held) - double(best.need);
          // At least what a PyTorch segment for this request would hold, so small requests do not map
          // a page each (Note [Lazy page release]).
          const std::size_t chunk = pool->small ? config.small_segment : size < (10u << 20) ? config.medium_segment : 0;
          const std::size_t mapped_now = (hi - x->addr) + (best.need - std::min(best.need, hi - x->addr));
          std::size_t ahead = page_up(std::size_t(config.map_ahead * double(stats.reserved_bytes.current)), page);
          // The small pool grows by at most its own size: small tensors never justify 2% of a large heap.
          if (pool->small) ahead = std::min(ahead, std::max(seg->mapped_bytes, config.small_segment));
          if (chunk > mapped_now) ahead = std::max(ahead, page_up(chunk - mapped_now, page));
          if (room < double(ahead)) ahead = room > 0 ? page_down(std::size_t(room), page) : 0;
          hi = std::min(hi + ahead, x->addr + x->size);
        }
        if (hi < x->addr + x->size) {
          Block* r = new_block();
          r->addr = hi;
          r->size = x->addr + x->size - hi;
          r->segment = seg;
          r->mapped = false;
          r->prev = x;
          r->next = x->next;
          if (x->next) x->next->prev = r;
          x->next = r;
          x->size = hi - x->addr;
        }
        to_map.push_back(x);
      } else {
        free_erase(x);
      }
      x->busy = true;
      window.push_back(x);
    }
    std::size_t need = 0;
    for (Block* x : to_map) need += x->size;
    // Keep reserved bytes within the page budget and the cap (Note [Lazy page release]).
    const std::int64_t hw = std::max<std::int64_t>(allocated_high_water, stats.allocated_bytes.current + std::int64_t(size));
    const auto budget = std::size_t(page_budget(hw));
    const auto reserved = std::size_t(stats.reserved_bytes.current);
    std::size_t limit = budget;
    if (cap) limit = std::min(limit, cap);
    if (reserved + need > limit) pick_releases(reserved + need - limit, 0, rel);
    if (cap && reserved + need - rel.bytes > cap) {
      // Cannot fit even after giving back what is free: undo and let grow() retry or fail.
      unpick_releases(rel);
      restore_window(window);
      return nullptr;
    }
  }
  // Source calls without the lock.
  run_releases(rel);
  std::size_t mapped_ok = 0;
  bool failed = false;
  for (Block* x : to_map) {
    bool ok = false;
    try {
      ok = source->map(reinterpret_cast<void*>(x->addr), x->size);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      finish_releases(rel, false);
      for (std::size_t i = 0; i < mapped_ok; ++i) {
        Block* y = to_map[i];
        y->mapped = true;
        seg->mapped_bytes += y->size;
        count_backed(std::int64_t(y->size));
        stats.num_device_map++;
      }
      restore_window(window);
      throw;
    }
    if (!ok) {
      failed = true;
      break;
    }
    ++mapped_ok;
  }
  std::lock_guard<std::mutex> lock(mu);
  finish_releases(rel, false);
  for (std::size_t i = 0; i < mapped_ok; ++i) {
    Block* x = to_map[i];
    x->mapped = true;
    seg->mapped_bytes += x->size;
    count_backed(std::int64_t(x->size));
    stats.num_device_map++;
    emit(EventKind::segment_map, x->addr, x->size, 0, pool->stream);
  }
  if (failed) {
    restore_window(window);
    return nullptr;
  }
  // Fold the window into one mapped block and carve the request from it.
  Block* m = window.front();
  for (std::size_t i = 1; i < window.size(); ++i) {
    Block* n = window[i];
    m->size += n->size;
    m->next = n->next;
    if (n->next) n->next->prev = m;
    delete_block(n);
  }
  m->busy = false;
  m->mapped = true;
  if (start > m->addr) {
    Block* r = new_block();
    r->addr = start;
    r->size = m->addr + m->size - start;
    r->segment = seg;
    r->mapped = true;
    r->prev = m;
    r->next = m->next;
    if (m->next) m->next->prev = r;
    m->next = r;
    m->size = start - m->addr;
    r->busy = true;  // keeps the prefix from merging back into it
    free_insert(merge_free(m));
    r->busy = false;
    m = r;
  }
  return take(m, size, requested);
}

Block* CachingAllocator::Impl::grow_whole(Pool* pool, std::size_t size, std::size_t requested) {
  std::size_t seg_size;
  Releases rel;
  {
    std::lock_guard<std::mutex> lock(mu);
    flush_recent();
    if (Block* b = find_free(pool, size)) {
      free_erase(b);
      return take(b, size, requested);
    }
    if (pool->small) seg_size = config.small_segment;
    else if (size < (10u << 20)) seg_size = config.medium_segment;
    else seg_size = page_up(size, config.large_round);
    seg_size = page_up(std::max(seg_size, size), page);
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
    std::lock_guard<std::mutex> lock(mu);
    finish_releases(rel, false);
  }
  void* p = source->allocate(seg_size);
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(mu);
  auto seg = std::make_unique<Segment>();
  seg->base = reinterpret_cast<std::uintptr_t>(p);
  seg->size = seg_size;
  seg->mapped_bytes = seg_size;
  seg->pool = pool;
  Block* b = new_block();
  b->addr = seg->base;
  b->size = seg_size;
  b->segment = seg.get();
  b->last_used = tick;
  seg->head = b;
  pool->segments.push_back(seg.get());
  segments.push_back(std::move(seg));
  stats.segment.increase(1);
  if (seg_size >= config.max_split_size) stats.oversize_segments.increase(1);
  count_backed(std::int64_t(seg_size));
  stats.num_device_alloc++;
  emit(EventKind::segment_alloc, b->addr, seg_size, 0, pool->stream);
  return take(b, size, requested);
}

}  // namespace memcomm::alloc
