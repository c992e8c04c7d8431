// MemoryFold: Note [Memory curves from block events] in memory_fold.hpp.
#include <memcomm/profiler/memory_fold.hpp>

namespace memcomm::prof {

void MemoryFold::reset(bool frees_complete) {
  blocks_.clear();
  segments_.clear();
  allocated_ = active_ = reserved_ = mapped_ = 0;
  frees_complete_ = frees_complete;
  broken_ = false;
}

bool MemoryFold::apply(FoldOp op, uint64_t addr, uint64_t size, bool virtual_range) {
  bool ok = true;
  switch (op) {
    case FoldOp::Alloc: {
      auto [it, fresh] = blocks_.try_emplace(addr, Block{size, false});
      if (!fresh) {  // allocated twice without a free: the free was lost; the new block replaces it
        ok = false;
        (it->second.pending ? active_ : allocated_) -= it->second.size;
        if (!it->second.pending) active_ -= it->second.size;
        it->second = {size, false};
      }
      allocated_ += size;
      active_ += size;
      break;
    }
    case FoldOp::FreeRequested: {
      auto it = blocks_.find(addr);
      if (it == blocks_.end() || it->second.pending) {  // allocated before the trace, or freed twice
        ok = false;
        break;
      }
      allocated_ -= it->second.size;
      if (frees_complete_) {
        it->second.pending = true;
      } else {
        active_ -= it->second.size;
        blocks_.erase(it);
      }
      break;
    }
    case FoldOp::FreeCompleted: {
      auto it = blocks_.find(addr);
      if (it == blocks_.end()) {
        ok = false;
        break;
      }
      if (!it->second.pending) allocated_ -= it->second.size;
      active_ -= it->second.size;
      blocks_.erase(it);
      break;
    }
    case FoldOp::SegmentAlloc: {
      auto [it, fresh] = segments_.try_emplace(addr, Segment{size, virtual_range});
      if (!fresh) {
        ok = false;
        if (!it->second.virtual_range) reserved_ -= it->second.size;
        it->second = {size, virtual_range};
      }
      if (!virtual_range) reserved_ += size;
      break;
    }
    case FoldOp::SegmentFree: {
      auto it = segments_.find(addr);
      if (it == segments_.end()) {
        ok = false;
        break;
      }
      if (!it->second.virtual_range) reserved_ -= it->second.size;
      segments_.erase(it);
      break;
    }
    case FoldOp::SegmentMap:
      mapped_ += size;
      reserved_ += size;
      break;
    case FoldOp::SegmentUnmap:
      mapped_ -= size;
      reserved_ -= size;
      ok = mapped_ >= 0;
      break;
  }
  if (!ok) broken_ = true;
  return ok;
}

}  // namespace memcomm::prof
