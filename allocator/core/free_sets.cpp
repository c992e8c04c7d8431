// The free side of the block lists: free sets with their inactive_split accounting, merging of free
// neighbours, and the recent-free cache in front of the free sets (Note [Recent frees]).

#include <algorithm>
#include <cassert>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

void CachingAllocator::Impl::count_split(Block* b) {
  b->counted_split = b->prev != nullptr || b->next != nullptr;
  if (b->counted_split) {
    stats.inactive_split.increase(1);
    stats.inactive_split_bytes.increase(std::int64_t(b->size));
  }
}

void CachingAllocator::Impl::uncount_split(Block* b) {
  if (b->counted_split) {
    stats.inactive_split.decrease(1);
    stats.inactive_split_bytes.decrease(std::int64_t(b->size));
    b->counted_split = false;
  }
}

// Note [Counting releasable bytes]
// Growth asks how many bytes release could give back now (the small pool's map-ahead discounts them at
// every growth), and make_room which free blocks could give them. Both used to walk every free block:
// a heap with a million small holes (none holding a whole page) then paid a million steps per growth,
// and allocating cost grew with the number of holes (bench/python/allocator_speed.py --workload holes,
// 1M holes: 62.8 s against plain torch's 10.6 s; 8.9 s now, bench/results/python-cpu.md).
// Only blocks holding a whole interior page, or a whole segment alone, can give anything, and few do.
// So each filed block's releasable bytes are counted when it is filed and uncounted when it leaves,
// and around the two paths that change a filed block's key or neighbours in place
// (Note [Re-keying in place]); the blocks with any are listed apart (releasable_blocks, swap-removed).
// pick_releases looks only at that list, and its order (Note [Release order]) is total, so its choices
// are unchanged.
// check_invariants recounts both.
void CachingAllocator::Impl::count_releasable(Block* b) {
  b->releasable_bytes = releasable(b);
  if (b->releasable_bytes == 0) return;
  releasable_total += b->releasable_bytes;
  b->releasable_slot = releasable_blocks.size();
  releasable_blocks.push_back(b);
}

void CachingAllocator::Impl::uncount_releasable(Block* b) {
  if (b->releasable_bytes == 0) return;
  releasable_total -= b->releasable_bytes;
  b->releasable_bytes = 0;
  Block* last = releasable_blocks.back();
  releasable_blocks[b->releasable_slot] = last;
  last->releasable_slot = b->releasable_slot;
  releasable_blocks.pop_back();
}

void CachingAllocator::Impl::free_insert(Block* b) {
  assert(b->mapped && !b->allocated && !b->busy && b->pending_events == 0 && !b->in_recent);
  assert(!b->filed);
  count_split(b);
  b->free_pos = b->segment->pool->free.insert(b).first;
  b->filed = true;
  count_releasable(b);
}

// A block that is not filed (a window's block that restore_window merges before filing it) stays as it
// is, as erasing a key the set does not hold would.
void CachingAllocator::Impl::free_erase(Block* b) {
  uncount_split(b);
  if (!b->filed) return;
  uncount_releasable(b);
  b->segment->pool->free.erase(b->free_pos);
  b->filed = false;
}

namespace {
// Neighbour `n` of free block `b` is free in the same way (mapped or not) and in no source call, wait
// or parking: the two merge.
bool merges_with(const Block* b, const Block* n) {
  return n && is_free(n) && n->mapped == b->mapped;
}
}  // namespace

// Note [Re-keying in place]
// A free set orders blocks by (size, address), so a filed block whose size or address changes must
// move in the set, an erase and an insert. Often its new key still sorts between the same two
// neighbours: then the block keeps its node and nothing moves (refile). Two paths change a filed
// block's key rather than replace it:
// - take_filed cuts a request from the low end of a filed block: the filed block becomes the
//   remainder, and the request gets a new block (take() used to make the remainder the new block and
//   file it, after taking the old one out);
// - file_merged lets a freed block's one filed neighbour absorb it (merge_free takes the neighbour out
//   and files the merged block).
// The layout is the same either way; only which Block object holds which range differs:
// `memcomm-replay --json` is identical on both shared snapshot sets and three synthetic ranges, with and
// without caps. A cached alloc+free pair of a large block (Note [Recent frees]: large blocks are not
// parked) then makes no set operation while its segment's free blocks keep their order. Instructions
// per pair (callgrind, a loop of 100,000 pairs on the simulated source): 8 MiB 1,113 -> 902;
// bench_allocator's iteration of 16 blocks of 1-4 MiB 1,003 -> 856.
void CachingAllocator::Impl::refile(Block* b, bool grew) {
  FreeSet& set = b->segment->pool->free;
  const BlockBySize less;
  // A key that grew can only have passed the blocks after it, one that shrank those before it.
  if (grew ? b == *set.rbegin() || less(b, *std::next(b->free_pos))
           : b == *set.begin() || less(*std::prev(b->free_pos), b))
    return;
  set.erase(b->free_pos);
  b->free_pos = set.insert(b).first;
}

void CachingAllocator::Impl::file_merged(Block* b) {
  const bool prev = merges_with(b, b->prev), next = merges_with(b, b->next);
  Block* keep = prev != next ? (prev ? b->prev : b->next) : nullptr;
  if (!keep || !keep->filed) {
    free_insert(merge_free(b));
    return;
  }
  uncount_split(keep);
  uncount_releasable(keep);
  absorb(keep, b);
  count_split(keep);
  refile(keep, /*grew=*/true);
  count_releasable(keep);
}

inline void CachingAllocator::Impl::absorb(Block* keep, Block* gone) {
  if (gone == keep->next) {
    keep->next = gone->next;
    if (gone->next) gone->next->prev = keep;
  } else {
    keep->addr = gone->addr;
    keep->prev = gone->prev;
    if (gone->prev) gone->prev->next = keep;
    else keep->segment->head = keep;
  }
  keep->size += gone->size;
  keep->last_used = std::max(keep->last_used, gone->last_used);
  merge_history(keep, gone);
  delete_block(gone);
}

// Note [Recent frees]
// A freed small block is first parked, unmerged, in a small per-pool LIFO. An allocation of exactly its
// size takes it back at once: the alloc/free pair of a training loop then touches neither the free set
// nor the block links. When the LIFO is full its oldest entry is merged and filed as usual, and any
// allocation that misses them, and every slow path (growth, release, empty_cache), files all of them
// first.
// Large blocks are not parked: free_block merges and files them at once. The LIFO is a placement rule of its
// own, not only a shortcut: it hands out the newest freed block of the size, and best fit over the merged
// state often would not. The newest one is usually among the tensors of a step freed together, in a range
// about to be free as a whole; best fit sees that range merged and takes an exact hole elsewhere. Where a
// large block goes decides where the next large request fits. hanfa (a 3,125 MiB request each step): a 48 MiB
// tensor that lives across the step took the newest parked 48 MiB block, which lay in the 3,125 MiB slot.
// That request then started 192 MiB higher every step, a map and an unmap each time: 136 calls against 90
// allowed. Filed at once, the tensor takes a 48 MiB hole outside the slot: 87 calls, 1.020 -> 1.011 x live.
// bench/replay/allocator_targets.py: select_n 423 -> 389 calls, octree-nca 104 -> 95. wedsonlin's last peak
// lands differently: 370 -> 373 calls (371 allowed), 1.013 -> 1.020 x live. The synthetic traces of
// bench/replay/synthetic_snapshots.py meeting every target went from 101 to 111 of 150 (seed ranges
// 1000-5000; transformers gain most). Small blocks keep the LIFO: they are the frequent case, and without it
// for them too 3 synthetic traces of seeds 3000-3009 miss a target (small blocks share 2 MiB pages, so which
// one is reused moves no large range). The price is speed: a cached 8 MiB alloc+free pair now splits a block
// and merges it back, where the parked block did neither: 551 -> 902 instructions per pair (callgrind), with
// Note [Re-keying in place]. Large tensors are allocated far less often than small ones, and
// bench_allocator's iteration of 16 blocks of 1-4 MiB, which merges and splits either way, costs 841 -> 856.
Block* CachingAllocator::Impl::take_recent(Pool* pool, std::size_t size) {
  for (std::size_t i = pool->n_recent; i-- > 0;) {
    Block* b = pool->recent[i];
    if (b->size == size) {  // exact fits only: a parked block never adds internal waste
      for (std::size_t j = i + 1; j < pool->n_recent; ++j) pool->recent[j - 1] = pool->recent[j];
      --pool->n_recent;
      b->in_recent = false;
      uncount_split(b);
      return b;
    }
  }
  return nullptr;
}

void CachingAllocator::Impl::flush_recent() {
  for (auto& pool : pools) {
    for (std::size_t i = 0; i < pool->n_recent; ++i) {
      Block* b = pool->recent[i];
      b->in_recent = false;
      uncount_split(b);
      free_insert(merge_free(b));
    }
    pool->n_recent = 0;
  }
}

// Merges a free (not allocated, not pending, not busy) block with like neighbours; returns the result,
// which is in no free set.
Block* CachingAllocator::Impl::merge_free(Block* b) {
  if (merges_with(b, b->prev)) {
    Block* p = b->prev;
    if (p->mapped) free_erase(p);
    else unmapped_erase(b);  // p keeps its place in the index: its address, the key, stays
    absorb(p, b);
    b = p;
  }
  if (merges_with(b, b->next)) {
    Block* n = b->next;
    if (n->mapped) free_erase(n);
    else unmapped_erase(n);
    absorb(b, n);
  }
  return b;
}

}  // namespace memcomm::alloc
