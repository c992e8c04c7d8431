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

namespace {
// One function per kind of event that AllocatorState::apply() dispatches on. Each keeps the state's
// totals in step with its segments and blocks, and counts an event that contradicts them in
// `unmatched` instead of failing (bad or mid-run traces still load).

void add_segment(AllocatorState& s, const AllocEvent& e) {
  auto it = std::lower_bound(s.segments.begin(), s.segments.end(), e.addr,
                             [](const SegmentRec& seg, std::uint64_t a) { return seg.addr < a; });
  if (it != s.segments.end() && it->addr == e.addr) {
    ++s.unmatched;  // mapped twice: keep the first
    return;
  }
  SegmentRec seg;
  seg.addr = e.addr;
  seg.size = e.size;
  seg.stream = e.stream;
  seg.expandable = (e.flags & prof::kSegmentVirtualRange) != 0;
  (seg.expandable ? s.virtual_reserved : s.reserved) += e.size;
  s.segments.insert(it, std::move(seg));
}

// The expandable segment a map at e.addr backs: the enclosing segment (converted to expandable if
// it was not marked), else an implicit one that a map with no segment starts or extends (Note
// [Expandable segments]). segments.end() when the map would overlap the next segment.
std::vector<SegmentRec>::iterator segment_to_map(AllocatorState& s, const AllocEvent& e) {
  auto seg = find_segment(s.segments, e.addr);
  if (seg != s.segments.end()) {
    if (!seg->expandable) {  // reserved before we knew: now we do
      s.reserved -= seg->size;
      s.virtual_reserved += seg->size;
      seg->expandable = true;
    }
    return seg;
  }
  auto after = std::upper_bound(s.segments.begin(), s.segments.end(), e.addr,
                                [](std::uint64_t a, const SegmentRec& r) { return a < r.addr; });
  if (after != s.segments.begin() && std::prev(after)->expandable && std::prev(after)->addr + std::prev(after)->size == e.addr &&
      (after == s.segments.end() || after->addr >= e.addr + e.size)) {
    seg = std::prev(after);  // continues an implicit expandable segment
    seg->size += e.size;
    s.virtual_reserved += e.size;
    return seg;
  }
  if (after != s.segments.end() && after->addr < e.addr + e.size) return s.segments.end();
  SegmentRec implicit;
  implicit.addr = e.addr;
  implicit.size = e.size;
  implicit.stream = e.stream;
  implicit.expandable = true;
  s.virtual_reserved += e.size;
  return s.segments.insert(after, std::move(implicit));
}

void map_range(AllocatorState& s, const AllocEvent& e) {
  auto seg = segment_to_map(s, e);
  if (seg == s.segments.end()) {
    ++s.unmatched;  // would overlap the next segment
    return;
  }
  const std::uint64_t end = std::min(e.addr + e.size, seg->addr + seg->size);
  const std::uint64_t added = add_range(seg->mapped, e.addr, end);
  if (added != e.size) ++s.unmatched;  // mapped twice, or past the reservation
  seg->mapped_bytes += added;
  s.reserved += added;
}

void unmap_range(AllocatorState& s, const AllocEvent& e) {
  auto seg = find_segment(s.segments, e.addr);
  if (seg == s.segments.end() || !seg->expandable) {
    ++s.unmatched;
    return;
  }
  const std::uint64_t removed = remove_range(seg->mapped, e.addr, e.addr + e.size);
  if (removed != e.size) ++s.unmatched;
  seg->mapped_bytes -= removed;
  s.reserved -= removed;
}

void free_segment(AllocatorState& s, const AllocEvent& e) {
  auto it = find_segment(s.segments, e.addr);
  if (it == s.segments.end() || it->addr != e.addr) {
    ++s.unmatched;
    return;
  }
  for (const auto& b : it->blocks) {  // a segment freed with live blocks: drop them too
    (b.state == BlockState::Allocated ? s.allocated : s.pending_free) -= b.size;
    --s.block_count;
  }
  s.reserved -= it->backed();
  if (it->expandable) s.virtual_reserved -= it->size;
  s.segments.erase(it);
}

void add_block(AllocatorState& s, const AllocEvent& e) {
  auto seg = find_segment(s.segments, e.addr);
  if (seg == s.segments.end()) {
    // Traces that start mid-run miss the segment event: make an implicit segment of the block.
    add_segment(s, AllocEvent{e.t, e.addr, e.size, e.stream, prof::EventKind::SegmentAlloc});
    seg = find_segment(s.segments, e.addr);
    if (seg == s.segments.end()) return;
  }
  auto& blocks = seg->blocks;
  auto it = std::lower_bound(blocks.begin(), blocks.end(), e.addr,
                             [](const BlockRec& b, std::uint64_t a) { return b.addr < a; });
  if (it != blocks.end() && it->addr == e.addr) {
    ++s.unmatched;  // allocated twice without a free: replace
    (it->state == BlockState::Allocated ? s.allocated : s.pending_free) -= it->size;
    *it = {e.addr, e.size, BlockState::Allocated};
    s.allocated += e.size;
    return;
  }
  if (e.addr + e.size > seg->addr + seg->size) {
    ++s.unmatched;
    return;
  }
  blocks.insert(it, {e.addr, e.size, BlockState::Allocated});
  s.allocated += e.size;
  ++s.block_count;
}

void request_free(AllocatorState& s, const AllocEvent& e) {
  auto seg = find_segment(s.segments, e.addr);
  if (seg == s.segments.end()) { ++s.unmatched; return; }
  auto it = find_block(seg->blocks, e.addr);
  if (it == seg->blocks.end() || it->state != BlockState::Allocated) { ++s.unmatched; return; }
  it->state = BlockState::PendingFree;
  s.allocated -= it->size;
  s.pending_free += it->size;
}

void complete_free(AllocatorState& s, const AllocEvent& e) {
  auto seg = find_segment(s.segments, e.addr);
  if (seg == s.segments.end()) { ++s.unmatched; return; }
  auto it = find_block(seg->blocks, e.addr);
  if (it == seg->blocks.end()) { ++s.unmatched; return; }
  (it->state == BlockState::Allocated ? s.allocated : s.pending_free) -= it->size;
  seg->blocks.erase(it);
  --s.block_count;
}
}  // namespace

void AllocatorState::apply(const AllocEvent& e) {
  switch (e.op) {
    case prof::EventKind::SegmentAlloc: add_segment(*this, e); return;
    case prof::EventKind::SegmentMap: map_range(*this, e); return;  // Note [Expandable segments]
    case prof::EventKind::SegmentUnmap: unmap_range(*this, e); return;
    case prof::EventKind::SegmentFree: free_segment(*this, e); return;
    case prof::EventKind::Alloc: add_block(*this, e); return;
    case prof::EventKind::FreeRequested: request_free(*this, e); return;
    case prof::EventKind::FreeCompleted: complete_free(*this, e); return;
    default: return;  // Oom: a failed request changes no block
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
