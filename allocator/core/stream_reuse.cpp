// Reusing memory across streams safely: record_stream, pooled events, and cross-stream reuse.
//
// Note [Stream-ordered reuse]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A block's user is the stream it was allocated on. Work queued on that stream is ordered, so the user
// may reuse the block as soon as it frees it, with no event: later work on the stream runs after
// earlier work that read the block. Other streams are not ordered with it. record_stream(ptr, s) says
// stream s uses the block too; freeing such a block records one pooled event per extra stream, and the
// block returns to the free set only when they have all completed (process_events_locked, queried on
// every allocation, as PyTorch queries cudaEvents in process_events).
//
// Note [Cross-stream reuse]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// PyTorch never gives a block of one stream's pool to another stream. Memcomm does, when an event says
// it is safe: a block is *idle* when every stream that used it has finished with it, and then any stream
// may take it instead of growing.
// - When two or more streams allocate (multi_stream), freeing a block that waits for events anyway (it
//   has record_stream uses) records one event more, on its user stream. Once all of them complete, the
//   block is idle: it is filed merged (not parked) in its pool's free set with Block::idle set. With
//   one allocating stream nobody could take it, so the extra event is not recorded.
// - An allocation whose own pool has nothing that fits looks, before growing, for the best-fitting idle
//   block of the same size class in other streams' pools (find_idle). The block stays in its segment
//   and pool; only its user changes (Block::stream), and alloc/free events name that user.
// - Such a *borrowed* block always waits for an event on its user stream when freed (the pool's own
//   stream is not ordered with the borrower), and is idle again when it completes.
// - Idle is conservative. Taking a block clears it, a split copies it, and a merge keeps it only if each
//   side is idle or fresh (never handed out since mapped: Block::fresh), so an idle block merged with
//   the map-ahead remainder next to it stays idle. Fresh memory alone is not idle: it stays with its
//   pool's stream, as in PyTorch. A block freed without events is not idle (its user's queued work may
//   still read it), so it is reused only by its pool's stream, until growth at the page budget waits
//   for that stream (Note [Lending before giving pages back]).
//
// Note [Lending before giving pages back]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Pools are per stream, and the page budget (Note [Lazy page release], growth.cpp) is one figure for
// all of them. When a stream's growth would cross the budget, make_room gives back free pages (Note
// [Release order]), whatever pool holds them, and maps the stream's own: pages move from one stream's
// range to another's at the cost of an unmap per piece and a map. select_n (pytorch-snapshots-2)
// allocates on a main stream and on eight side streams, each used for a few iterations: every
// iteration the main stream's 1 GiB requests took a side stream's free pages and the side stream took
// them back, 1,113 source calls against a PyTorch-mode allowance of 234, at 1.030 x live.
// The churn allowance (Note [Release churn], expandable.cpp) could not stop it: each new side stream
// starts new pools, and the trade was ~5% of the high water.
// Moving a free block's pages to another stream is safe only once the work queued on its stream before
// the free has finished; PyTorch's expandable segments synchronize the stream before they unmap for
// that reason. Waiting for that stream makes every free block of its pool safe for every stream, and
// then no page needs to move: growth that would give pages back first looks for the best fit among
// other streams' free blocks of its size class (lend_after_sync), records one event on the owner's
// stream and waits for it, marks the owner's free blocks idle, and takes the block as a borrower
// (Note [Cross-stream reuse]): no source call, reserved bytes unchanged. Later misses of any stream
// find those idle blocks with find_idle, without another wait.
// Only at the budget (or the cap): with room under it, growth maps as before rather than stall the host
// on another stream's work, and with one allocating stream nothing waits. num_stream_syncs counts the
// waits. Measured (memcomm-replay, memcomm policy): select_n 1,113 -> 367 calls and 1.030 -> 1.020 x
// live, with 41 waits (35 of them a side stream's for the main stream); no other shared snapshot has a
// second allocating stream, and none changes.

#include <algorithm>
#include <string>

#include "allocator_impl.hpp"

namespace memcomm::alloc {

std::string hex_address(std::uintptr_t p);  // caching_allocator.cpp

bool CachingAllocator::Impl::defer_free(Block* b) {
  const bool borrowed = b->stream != b->segment->pool->stream;
  const bool used_elsewhere = b->uses && !b->uses->empty();
  if (!borrowed && !used_elsewhere) return false;
  static const std::vector<StreamId> kNone;
  frees.defer(b, used_elsewhere ? *b->uses : kNone, b->stream, borrowed || multi_stream);
  return true;
}

void CachingAllocator::Impl::process_events_locked() {
  for (const StreamOrderedFrees::Completed& c : frees.collect()) {
    c.block->pending_events = 0;
    if (c.idle) {
      c.block->idle = true;  // filed merged, so other streams' find_idle sees it (Note [Cross-stream reuse])
      free_block(c.block, /*park=*/false);
    } else {
      free_block(c.block);
    }
  }
}

void CachingAllocator::Impl::synchronize_pending() {
  if (!frees.synchronize_all()) return;
  stats.num_sync_all_streams++;
  process_events_locked();
}

Block* CachingAllocator::Impl::find_idle(StreamId stream, bool small, std::size_t size) {
  Block key;
  key.size = size;
  key.addr = 0;
  Block* best = nullptr;
  // Looks at a bounded number of blocks per pool: this runs on every miss before growth, and a cache
  // full of blocks freed without events (never idle) must not make that miss linear in its size.
  constexpr int kMaxLook = 32;
  for (auto& pool : pools) {
    if (pool->stream == stream || pool->small != small) continue;
    int looked = 0;
    for (auto it = pool->free.lower_bound(&key); it != pool->free.end() && looked < kMaxLook; ++it, ++looked) {
      Block* b = *it;
      if (best && b->size >= best->size) break;  // sorted by size: nothing better in this pool
      if (b->idle && fits(b, size)) {
        best = b;
        break;
      }
    }
  }
  return best;
}

Block* CachingAllocator::Impl::lend_after_sync(StreamId stream, bool small, std::size_t size) {
  Block* best = nullptr;
  for (auto& pool : pools) {
    if (pool->stream == stream || pool->small != small) continue;
    Block* b = find_free(pool.get(), size);
    if (b && (!best || BlockBySize{}(b, best))) best = b;
  }
  if (!best) return nullptr;
  Pool* owner = best->segment->pool;
  const EventHandle e = streams->create_event();
  streams->record_event(e, owner->stream);
  streams->synchronize_event(e);
  streams->destroy_event(e);
  stats.num_stream_syncs++;
  for (Block* b : owner->free) b->idle = true;  // the owner's work that used them has finished
  return best;
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  Impl& m = *impl_;
  AllocatorLock lock(m.mu);
  const auto addr = reinterpret_cast<std::uintptr_t>(ptr);
  Block** found = m.live.find(addr);
  if (!found) throw AllocatorError("record_stream(" + hex_address(addr) + "): not a live block of this allocator");
  Block* b = *found;
  if (stream == b->stream) return;
  if (!b->uses) b->uses = new std::vector<StreamId>();
  if (std::find(b->uses->begin(), b->uses->end(), stream) == b->uses->end()) b->uses->push_back(stream);
}

void CachingAllocator::process_events() {
  AllocatorLock lock(impl_->mu);
  impl_->process_events_locked();
  impl_->flush_recent();
}

// Note [Emptying the cache forgets the high water]: the page budget and map-ahead measure from the
// high waters of allocated and reserved bytes (Note [Lazy page release], Note [Map-ahead in a
// trough]), which otherwise only grow: what a run held once, it is expected to hold again. A script
// that empties the cache says the opposite (a tuner's probe after a larger one that ran out, a phase
// that ended), and remembered, that high water let the next smaller run map up to the larger one's
// footprint: an LSTM step at micro-batch 4 reserved 34 MiB after a probe at 32 had run out, 14 MiB
// in a fresh process, and the tuner read that as fragmentation. So empty_cache() starts the high
// waters afresh from what is held after it.
void CachingAllocator::empty_cache() {
  Impl& m = *impl_;
  {
    AllocatorLock lock(m.mu);
    m.synchronize_pending();
  }
  m.release_free(0, 0, false);  // files parked blocks first
  AllocatorLock lock(m.mu);
  m.allocated_high_water = m.allocated_low_since_high_water = m.stats.allocated_bytes.current;
  m.last_iteration_peak = 0;
  m.reserved_high_water = m.stats.reserved_bytes.current;
}

}  // namespace memcomm::alloc
