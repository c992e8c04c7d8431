// MemoryFold: Note [Memory curves from block events] in memory_fold.hpp.
#include <memcomm/trace/memory_fold.hpp>

#include <iterator>

namespace memcomm::prof {

void MemoryFold::reset(bool frees_complete) {
  blocks_.clear();
  dead_ = 0;
  segments_.clear();
  allocated_ = active_ = reserved_ = mapped_ = 0;
  frees_complete_ = frees_complete;
  broken_ = false;
}

bool MemoryFold::apply(EventKind kind, uint64_t addr, uint64_t size, bool virtual_range) {
  bool ok = true;
  switch (kind) {
    case EventKind::Alloc: {
      auto [it, fresh] = blocks_.try_emplace(addr, Block{size, false, true});
      if (!fresh && !it->second.live) {  // an address reused: the common case of a caching allocator
        it->second = {size, false, true};
        --dead_;
      } else if (!fresh) {  // allocated twice without a free: the free was lost; the new block replaces it
        ok = false;
        (it->second.pending ? active_ : allocated_) -= it->second.size;
        if (!it->second.pending) active_ -= it->second.size;
        it->second = {size, false, true};
      }
      allocated_ += size;
      active_ += size;
      break;
    }
    case EventKind::FreeRequested: {
      auto it = blocks_.find(addr);
      // Allocated before the trace, or freed twice.
      if (it == blocks_.end() || !it->second.live || it->second.pending) {
        ok = false;
        break;
      }
      allocated_ -= it->second.size;
      if (frees_complete_) {
        it->second.pending = true;
      } else {
        active_ -= it->second.size;
        bury(it->second);
      }
      break;
    }
    case EventKind::FreeCompleted: {
      auto it = blocks_.find(addr);
      if (it == blocks_.end() || !it->second.live) {
        ok = false;
        break;
      }
      if (!it->second.pending) allocated_ -= it->second.size;
      active_ -= it->second.size;
      bury(it->second);
      break;
    }
    case EventKind::SegmentAlloc: {
      auto [it, fresh] = segments_.try_emplace(addr, Segment{size, virtual_range});
      if (!fresh) {
        ok = false;
        if (!it->second.virtual_range) reserved_ -= it->second.size;
        it->second = {size, virtual_range};
      }
      if (!virtual_range) reserved_ += size;
      break;
    }
    case EventKind::SegmentFree: {
      auto it = segments_.find(addr);
      if (it == segments_.end()) {
        ok = false;
        break;
      }
      if (!it->second.virtual_range) reserved_ -= it->second.size;
      segments_.erase(it);
      break;
    }
    case EventKind::SegmentMap:
      mapped_ += size;
      reserved_ += size;
      break;
    case EventKind::SegmentUnmap:
      mapped_ -= size;
      reserved_ -= size;
      ok = mapped_ >= 0;
      break;
    default:  // not a block event: OOMs, samples and the rest leave the levels as they are
      break;
  }
  if (!ok) broken_ = true;
  return ok;
}

// Note [Dead blocks stay in the map]: a caching allocator hands the same addresses out again and
// again, so a freed block's entry is kept, marked dead, and the next Alloc at that address reuses it:
// no node is freed and allocated per event (erase + insert made the fold ~15 % of a 10 M-event load).
// Once dead entries outnumber live ones four to one (an allocator that does not reuse addresses),
// they are swept, which keeps the map within a constant factor of the live blocks.
void MemoryFold::bury(Block& b) {
  b.live = false;
  b.pending = false;
  if (++dead_ > 4096 && dead_ > 4 * (blocks_.size() - dead_)) {
    for (auto it = blocks_.begin(); it != blocks_.end();) it = it->second.live ? std::next(it) : blocks_.erase(it);
    dead_ = 0;
  }
}

}  // namespace memcomm::prof
