// AllocatorFold's blocks and levels (Note [Allocator fold rules] in allocator_fold.hpp): a hash map
// from address to block, whose freed entries stay for the address's next Alloc (Note [Dead blocks
// stay in the map]); each event is one lookup and a few sums. The segments are fold_segments.cpp's.
#include <memcomm/trace/allocator_fold.hpp>

#include <iterator>

namespace memcomm::prof {

void AllocatorFold::reset(Options o) { *this = AllocatorFold(o); }

FoldCheck AllocatorFold::apply(EventKind kind, uint64_t addr, uint64_t size, bool virtual_range, FoldObserver* obs) {
  FoldCheck c = FoldCheck::Ok;
  switch (kind) {
    case EventKind::Alloc: c = alloc(addr, size, obs); break;
    case EventKind::FreeRequested: c = free_requested(addr, obs); break;
    case EventKind::FreeCompleted: c = free_completed(addr, obs); break;
    case EventKind::SegmentAlloc: c = segment_alloc(addr, size, virtual_range, obs); break;
    case EventKind::SegmentFree: c = segment_free(addr, obs); break;
    case EventKind::SegmentMap: c = map(addr, size, obs); break;
    case EventKind::SegmentUnmap: c = unmap(addr, size, obs); break;
    default: break;  // not a block event: OOMs, samples and the rest leave the state as it is
  }
  if (c != FoldCheck::Ok) ++contradictions_;
  return c;
}

const FoldBlock* AllocatorFold::block(uint64_t addr) const {
  auto it = blocks_.find(addr);
  return it == blocks_.end() ? nullptr : &it->second;
}

FoldCheck AllocatorFold::alloc(uint64_t addr, uint64_t size, FoldObserver* obs) {
  FoldCheck c = FoldCheck::Ok;
  auto [it, fresh] = blocks_.try_emplace(addr, FoldBlock{size, next_id_, BlockLife::Allocated});
  if (!fresh) {
    if (it->second.live()) {  // allocated twice without a free: the free was lost; the old block ends
      c = FoldCheck::Replaced;
      release(it, obs);
    } else {  // an address reused: the common case of a caching allocator
      --dead_;
    }
    it->second = {size, next_id_, BlockLife::Allocated};
  }
  ++next_id_;
  FoldSegment* seg = containing(addr);
  if (seg == nullptr) {  // a trace that starts mid-run missed the segment: an implicit one of the block
    seg = &add_segment(addr, size, false, obs);
  } else if (addr + size > seg->addr + seg->size) {
    c = FoldCheck::Conflict;
  }
  ++seg->live_blocks;
  allocated_ += size;
  active_ += size;
  if (obs) obs->block_added(addr, it->second);
  return c;
}

FoldCheck AllocatorFold::free_requested(uint64_t addr, FoldObserver* obs) {
  auto it = blocks_.find(addr);
  if (it == blocks_.end() || it->second.life != BlockLife::Allocated) return free_unheld(addr, false);
  if (!opt_.frees_complete) {
    end_block(it, obs);
    return FoldCheck::Ok;
  }
  allocated_ -= it->second.size;
  it->second.life = BlockLife::PendingFree;
  if (obs) obs->block_pending(addr, it->second);
  return FoldCheck::Ok;
}

FoldCheck AllocatorFold::free_completed(uint64_t addr, FoldObserver* obs) {
  auto it = blocks_.find(addr);
  if (it == blocks_.end() || !it->second.live()) return free_unheld(addr, true);
  end_block(it, obs);
  return FoldCheck::Ok;
}

// A free of a block the fold does not hold: remembered, so that a second completion is told apart
// from the first free of a block allocated before the trace.
FoldCheck AllocatorFold::free_unheld(uint64_t addr, bool completed) {
  auto [it, fresh] = blocks_.try_emplace(addr, FoldBlock{0, 0, completed ? BlockLife::Freed : BlockLife::Named});
  if (fresh) {
    ++dead_;
    return FoldCheck::Unknown;
  }
  if (it->second.life == BlockLife::PendingFree) return FoldCheck::Conflict;  // requested twice
  const bool ended = it->second.life == BlockLife::Freed;
  if (completed) it->second.life = BlockLife::Freed;
  return ended ? FoldCheck::Ended : FoldCheck::Unknown;
}

// A live block leaves the levels (out of active, out of allocated unless its free was requested
// first) and its segment; the entry stays as it was.
void AllocatorFold::release(BlockMap::iterator it, FoldObserver* obs) {
  const FoldBlock& b = it->second;
  if (b.life == BlockLife::Allocated) allocated_ -= b.size;
  active_ -= b.size;
  FoldSegment* seg = containing(it->first);
  if (seg != nullptr && seg->live_blocks > 0) --seg->live_blocks;
  if (obs) obs->block_removed(it->first, b);
}

void AllocatorFold::end_block(BlockMap::iterator it, FoldObserver* obs) {
  release(it, obs);
  bury(it->second);
}

// Note [Dead blocks stay in the map]: a caching allocator hands the same addresses out again and
// again, so a freed block's entry is kept, marked dead, and the next Alloc at that address reuses it:
// no node is freed and allocated per event (erase + insert made the fold ~15 % of a 10 M-event load).
// Once dead entries outnumber live ones four to one (an allocator that does not reuse addresses),
// they are swept, which keeps the map within a constant factor of the live blocks; unless the
// Options keep them (memcomm-replay tells a block freed twice from one allocated before the trace).
void AllocatorFold::bury(FoldBlock& b) {
  b.life = BlockLife::Freed;
  if (++dead_ > 4096 && !opt_.keep_freed && dead_ > 4 * (blocks_.size() - dead_)) {
    for (auto it = blocks_.begin(); it != blocks_.end();) it = it->second.live() ? std::next(it) : blocks_.erase(it);
    dead_ = 0;
  }
}

size_t AllocatorFold::memory_bytes() const {
  size_t b = sizeof(*this) + blocks_.size() * (sizeof(BlockMap::value_type) + 2 * sizeof(void*)) +
             blocks_.bucket_count() * sizeof(void*);
  for (const auto& [addr, s] : segments_) b += sizeof(s) + 4 * sizeof(void*) + s.mapped.capacity() * sizeof(AddrRange);
  return b;
}

}  // namespace memcomm::prof
