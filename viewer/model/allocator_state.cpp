#include <memcomm/view/allocator_state.hpp>

#include <algorithm>

namespace memcomm::view {

std::uint64_t SegmentRec::extent_end() const {
  if (!expandable) return addr + size;
  std::uint64_t e = addr + 1;
  if (!mapped.empty()) e = std::max(e, mapped.back().end);
  if (!blocks.empty()) e = std::max(e, blocks.back().addr + blocks.back().size);
  return std::min(e, addr + size);
}

std::uint64_t SegmentRec::largest_free() const {
  if (expandable) {  // gaps between blocks inside each mapped range
    std::uint64_t best = 0;
    std::size_t bi = 0;
    for (const auto& r : mapped) {
      while (bi < blocks.size() && blocks[bi].addr + blocks[bi].size <= r.begin) ++bi;
      std::uint64_t at = r.begin;
      for (std::size_t j = bi; j < blocks.size() && blocks[j].addr < r.end; ++j) {
        if (blocks[j].addr > at) best = std::max(best, blocks[j].addr - at);
        at = std::max(at, blocks[j].addr + blocks[j].size);
      }
      if (r.end > at) best = std::max(best, r.end - at);
    }
    return best;
  }
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
// Adds [b, e) to sorted, disjoint, non-touching ranges; returns the bytes newly covered.
std::uint64_t add_range(std::vector<AddrRange>& rs, std::uint64_t b, std::uint64_t e) {
  if (e <= b) return 0;
  // First range that ends at or after b (touching ranges coalesce).
  auto lo = std::lower_bound(rs.begin(), rs.end(), b, [](const AddrRange& r, std::uint64_t v) { return r.end < v; });
  std::uint64_t covered = 0, nb = b, ne = e;
  auto hi = lo;
  for (; hi != rs.end() && hi->begin <= e; ++hi) {
    covered += std::min(hi->end, e) > std::max(hi->begin, b) ? std::min(hi->end, e) - std::max(hi->begin, b) : 0;
    nb = std::min(nb, hi->begin);
    ne = std::max(ne, hi->end);
  }
  lo = rs.erase(lo, hi);
  rs.insert(lo, {nb, ne});
  return (e - b) - covered;
}
// Removes [b, e); returns the bytes that were covered.
std::uint64_t remove_range(std::vector<AddrRange>& rs, std::uint64_t b, std::uint64_t e) {
  if (e <= b) return 0;
  std::uint64_t removed = 0;
  std::vector<AddrRange> out;
  out.reserve(rs.size() + 1);
  for (const auto& r : rs) {
    if (r.end <= b || r.begin >= e) {
      out.push_back(r);
      continue;
    }
    removed += std::min(r.end, e) - std::max(r.begin, b);
    if (r.begin < b) out.push_back({r.begin, b});
    if (r.end > e) out.push_back({e, r.end});
  }
  rs.swap(out);
  return removed;
}
}  // namespace

void AllocatorState::apply(const AllocEvent& e) {
  switch (e.op) {
    case prof::EventKind::SegmentAlloc: {
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
      seg.expandable = (e.flags & prof::kSegmentVirtualRange) != 0;
      (seg.expandable ? virtual_reserved : reserved) += e.size;
      segments.insert(it, std::move(seg));
      return;
    }
    case prof::EventKind::SegmentMap: {  // Note [Expandable segments]
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) {
        auto after = std::upper_bound(segments.begin(), segments.end(), e.addr,
                                      [](std::uint64_t a, const SegmentRec& s) { return a < s.addr; });
        if (after != segments.begin() && std::prev(after)->expandable && std::prev(after)->addr + std::prev(after)->size == e.addr &&
            (after == segments.end() || after->addr >= e.addr + e.size)) {
          seg = std::prev(after);  // continues an implicit expandable segment
          seg->size += e.size;
          virtual_reserved += e.size;
        } else {
          if (after != segments.end() && after->addr < e.addr + e.size) {
            ++unmatched;  // would overlap the next segment
            return;
          }
          SegmentRec implicit;
          implicit.addr = e.addr;
          implicit.size = e.size;
          implicit.stream = e.stream;
          implicit.expandable = true;
          virtual_reserved += e.size;
          seg = segments.insert(after, std::move(implicit));
        }
      } else if (!seg->expandable) {  // reserved before we knew: now we do
        reserved -= seg->size;
        virtual_reserved += seg->size;
        seg->expandable = true;
      }
      const std::uint64_t end = std::min(e.addr + e.size, seg->addr + seg->size);
      const std::uint64_t added = add_range(seg->mapped, e.addr, end);
      if (added != e.size) ++unmatched;  // mapped twice, or past the reservation
      seg->mapped_bytes += added;
      reserved += added;
      return;
    }
    case prof::EventKind::SegmentUnmap: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end() || !seg->expandable) {
        ++unmatched;
        return;
      }
      const std::uint64_t removed = remove_range(seg->mapped, e.addr, e.addr + e.size);
      if (removed != e.size) ++unmatched;
      seg->mapped_bytes -= removed;
      reserved -= removed;
      return;
    }
    case prof::EventKind::SegmentFree: {
      auto it = find_segment(segments, e.addr);
      if (it == segments.end() || it->addr != e.addr) {
        ++unmatched;
        return;
      }
      for (const auto& b : it->blocks) {  // a segment freed with live blocks: drop them too
        (b.state == BlockState::Allocated ? allocated : pending_free) -= b.size;
        --block_count;
      }
      reserved -= it->backed();
      if (it->expandable) virtual_reserved -= it->size;
      segments.erase(it);
      return;
    }
    case prof::EventKind::Alloc: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) {
        // Traces that start mid-run miss the segment event: make an implicit segment of the block.
        apply(AllocEvent{e.t, e.addr, e.size, e.stream, prof::EventKind::SegmentAlloc});
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
    case prof::EventKind::FreeRequested: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) { ++unmatched; return; }
      auto it = find_block(seg->blocks, e.addr);
      if (it == seg->blocks.end() || it->state != BlockState::Allocated) { ++unmatched; return; }
      it->state = BlockState::PendingFree;
      allocated -= it->size;
      pending_free += it->size;
      return;
    }
    case prof::EventKind::FreeCompleted: {
      auto seg = find_segment(segments, e.addr);
      if (seg == segments.end()) { ++unmatched; return; }
      auto it = find_block(seg->blocks, e.addr);
      if (it == seg->blocks.end()) { ++unmatched; return; }
      (it->state == BlockState::Allocated ? allocated : pending_free) -= it->size;
      seg->blocks.erase(it);
      --block_count;
      return;
    }
    default:  // Oom: a failed request changes no block
      return;
  }
}

AllocatorTimeline::AllocatorTimeline(const AllocEvents* events, std::size_t min_interval)
    : events_(events), min_interval_(min_interval) {
  update(0);
  checkpoints_.shrink_to_fit();
}

void AllocatorTimeline::update(std::size_t first_changed) {
  if (events_ == nullptr) return;
  if (first_changed < folded_ || checkpoints_.empty()) {  // history changed: fold again from the start
    checkpoints_.clear();
    checkpoints_.push_back({0, AllocatorState{}});
    tail_ = AllocatorState{};
    folded_ = since_ = 0;
  }
  if (pos_ > first_changed) {  // the cursor state includes changed events
    cur_ = AllocatorState{};
    pos_ = 0;
  }
  // Note [Incremental allocator state]: one pass, copying the state at growing intervals.
  for (; folded_ < events_->size(); ++folded_) {
    tail_.apply((*events_)[folded_]);
    if (++since_ >= std::max(min_interval_, tail_.block_count + tail_.segments.size())) {
      checkpoints_.push_back({folded_ + 1, tail_});
      since_ = 0;
    }
  }
}

const AllocatorState& AllocatorTimeline::seek(std::int64_t t) {
  if (events_ == nullptr) return cur_;
  const std::size_t n = lower_bound_index(*events_, t, [](const AllocEvent& e, std::int64_t v) { return e.t <= v; });  // upper bound
  return seek_index(n);
}

const AllocatorState& AllocatorTimeline::seek_index(std::size_t n) {
  last_cost_ = 0;
  if (events_ == nullptr) return cur_;
  n = std::min(n, folded_);
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
