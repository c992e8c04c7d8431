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

void CachingAllocator::Impl::free_insert(Block* b) {
  assert(b->mapped && !b->allocated && !b->busy && b->pending_events == 0 && !b->in_recent);
  count_split(b);
  b->segment->pool->free.insert(b);
}

void CachingAllocator::Impl::free_erase(Block* b) {
  uncount_split(b);
  b->segment->pool->free.erase(b);
}

// Note [Recent frees]
// A freed block is first parked, unmerged, in a small per-pool LIFO. An allocation of exactly its size
// takes it back at once: the alloc/free pair of a training loop then touches neither
// the free set nor the block links. When the LIFO is full its oldest entry is merged and filed as usual,
// and any allocation that misses them, and every slow path (growth, release, empty_cache), files all of
// them first, so best fit always sees the merged state: parked blocks are only a shortcut in front of it.
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
  auto mergeable = [&](Block* n) {
    return n && !n->allocated && !n->busy && n->pending_events == 0 && !n->in_recent && n->mapped == b->mapped;
  };
  if (mergeable(b->prev)) {
    Block* p = b->prev;
    if (p->mapped) free_erase(p);
    else unmapped_erase(b);  // p keeps its place in the index: its address, the key, stays
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    p->last_used = std::max(p->last_used, b->last_used);
    merge_history(p, b);
    if (b->segment->head == b) b->segment->head = p;
    delete_block(b);
    b = p;
  }
  if (mergeable(b->next)) {
    Block* n = b->next;
    if (n->mapped) free_erase(n);
    else unmapped_erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    b->last_used = std::max(b->last_used, n->last_used);
    merge_history(b, n);
    delete_block(n);
  }
  return b;
}

}  // namespace memcomm::alloc
