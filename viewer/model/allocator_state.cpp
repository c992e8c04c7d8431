#include <memcomm/view/allocator_state.hpp>

#include <algorithm>

namespace memcomm::view {

std::uint64_t SegmentRec::largest_free() const {
  std::uint64_t best = 0, at = addr;
  for (const auto& b : blocks) {
    if (b.addr > at) best = std::max(best, b.addr - at);
    at = std::max(at, b.addr + b.size);
  }
  if (addr + size > at) best = std::max(best, addr + size - at);
  return best;
}

std::uint64_t AllocatorState::largest_free() const {
  std::uint64_t best = 0;
  for (const auto& s : segments) best = std::max(best, s.largest_free());
  return best;
}

namespace {
// The segment containing addr, or segments.end().
std::vector<SegmentRec>::iterator find_segment(std::vector<SegmentRec>& segs, std::uint64_t addr) {
  auto it = std::upper_bound(segs.begin(), segs.end(), addr,
                             [](std::uint64_t a, const SegmentRec& s) { return a < s.addr; });
  if (it == segs.begin()) return segs.end();
  --it;
  return addr < it->addr + it->size ? it : segs.end();
}
std::vector<BlockRec>::iterator find_block(std::vector<BlockRec>& blocks, std::uint64_t addr) {
  auto it = std::lower_bound(blocks.begin(), blocks.end(), addr,
                             [](const BlockRec& b, std::uint64_t a) { return b.addr < a; });
  return it != blocks.end() && it->addr == addr ? it : blocks.end();
}
}  // namespace

void AllocatorState::apply(const AllocEvent& e) {
  switch (e.op) {
    case AllocOp::SegmentAlloc: {
      auto it = std::lower_bound(segments.begin(), segments.end(), e.addr,
                                 [](const SegmentRec& s, std::uint64_t a) { return s.addr < a; });
      if (it != segments.end() && it->addr == e.addr) {
        ++unmatched;  // mapped twice: keep the first
        return;
      }
      SegmentRec seg;
      seg.addr = e.addr;
      seg.size = e.size;
      seg.stream = e.stream;
      segments.insert(it, std::move(seg));
      reserved += e.size;
      return;
    }
    case AllocOp::SegmentFree: {
      auto it = find_segment(segments, e.addr);
      if (it == segments.end() || it->addr != e.addr) {
        ++unmatched;
        return;
      }
      for (const auto& b : it->blocks) {  // a segment freed with live blocks: drop them too
        (b.state == BlockState::Allocated ? allocated : pending_free) -= b.size;
        --block_count;
      }
      reserved -= it->size;
      segments.erase(it);
      return;
    }
    case AllocOp::Alloc: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) {
        // Traces that start mid-run miss the segment event: make an implicit segment of the block.
        apply(AllocEvent{e.t, e.addr, e.size, e.stream, AllocOp::SegmentAlloc});
        seg = find_segment(segments, e.addr);
        if (seg == segments.end()) return;
      }
      auto& blocks = seg->blocks;
      auto it = std::lower_bound(blocks.begin(), blocks.end(), e.addr,
                                 [](const BlockRec& b, std::uint64_t a) { return b.addr < a; });
      if (it != blocks.end() && it->addr == e.addr) {
        ++unmatched;  // allocated twice without a free: replace
        (it->state == BlockState::Allocated ? allocated : pending_free) -= it->size;
        *it = {e.addr, e.size, BlockState::Allocated};
        allocated += e.size;
        return;
      }
      if (e.addr + e.size > seg->addr + seg->size) {
        ++unmatched;
        return;
      }
      blocks.insert(it, {e.addr, e.size, BlockState::Allocated});
      allocated += e.size;
      ++block_count;
      return;
    }
    case AllocOp::FreeRequested: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) { ++unmatched; return; }
      auto it = find_block(seg->blocks, e.addr);
      if (it == seg->blocks.end() || it->state != BlockState::Allocated) { ++unmatched; return; }
      it->state = BlockState::PendingFree;
      allocated -= it->size;
      pending_free += it->size;
      return;
    }
    case AllocOp::FreeCompleted: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) { ++unmatched; return; }
      auto it = find_block(seg->blocks, e.addr);
      if (it == seg->blocks.end()) { ++unmatched; return; }
      (it->state == BlockState::Allocated ? allocated : pending_free) -= it->size;
      seg->blocks.erase(it);
      --block_count;
      return;
    }
    case AllocOp::Oom:
      return;
  }
}

AllocatorTimeline::AllocatorTimeline(const std::vector<AllocEvent>* events, std::size_t min_interval)
    : events_(events) {
  // Note [Incremental allocator state]: one pass, copying the state at growing intervals.
  AllocatorState s;
  checkpoints_.push_back({0, s});
  std::size_t since = 0;
  for (std::size_t i = 0; i < events_->size(); ++i) {
    s.apply((*events_)[i]);
    if (++since >= std::max(min_interval, s.block_count + s.segments.size())) {
      checkpoints_.push_back({i + 1, s});
      since = 0;
    }
  }
  checkpoints_.shrink_to_fit();
}

const AllocatorState& AllocatorTimeline::seek(std::int64_t t) {
  if (events_ == nullptr) return cur_;
  const auto n = static_cast<std::size_t>(
      std::upper_bound(events_->begin(), events_->end(), t, [](std::int64_t v, const AllocEvent& e) { return v < e.t; }) -
      events_->begin());
  return seek_index(n);
}

const AllocatorState& AllocatorTimeline::seek_index(std::size_t n) {
  last_cost_ = 0;
  if (events_ == nullptr) return cur_;
  n = std::min(n, events_->size());
  if (n == pos_) return cur_;
  // The checkpoint at or before n; restart from it unless stepping forward from here is shorter.
  auto cp = std::upper_bound(checkpoints_.begin(), checkpoints_.end(), n,
                             [](std::size_t v, const Checkpoint& c) { return v < c.index; });
  --cp;
  if (n < pos_ || cp->index > pos_) {
    cur_ = cp->state;
    pos_ = cp->index;
  }
  for (; pos_ < n; ++pos_, ++last_cost_) cur_.apply((*events_)[pos_]);
  return cur_;
}

std::size_t AllocatorTimeline::memory_bytes() const {
  std::size_t b = sizeof(*this);
  for (const auto& c : checkpoints_) {
    b += sizeof(c) + c.state.segments.capacity() * sizeof(SegmentRec);
    for (const auto& s : c.state.segments) b += s.blocks.capacity() * sizeof(BlockRec);
  }
  return b;
}

}  // namespace memcomm::view
