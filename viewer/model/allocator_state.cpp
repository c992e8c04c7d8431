// AllocatorState: the trace layer's AllocatorFold, mirrored into segments with sorted blocks for the
// allocator view (see allocator_state.hpp), plus the free-space figures drawn from them.
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

std::vector<SegmentRec>::iterator find_segment(std::vector<SegmentRec>& segs, std::uint64_t addr) {
  auto it = std::upper_bound(segs.begin(), segs.end(), addr,
                             [](std::uint64_t a, const SegmentRec& s) { return a < s.addr; });
  if (it == segs.begin()) return segs.end();
  --it;
  return addr - it->addr < it->size ? it : segs.end();
}

std::vector<SegmentRec>::iterator segment_at(std::vector<SegmentRec>& segs, std::uint64_t addr) {
  return std::lower_bound(segs.begin(), segs.end(), addr, [](const SegmentRec& s, std::uint64_t a) { return s.addr < a; });
}

std::vector<BlockRec>::iterator block_at(std::vector<BlockRec>& blocks, std::uint64_t addr) {
  return std::lower_bound(blocks.begin(), blocks.end(), addr, [](const BlockRec& b, std::uint64_t a) { return b.addr < a; });
}

// Mirrors the fold's changes into the drawing containers, during one AllocatorFold::apply().
class Mirror final : public prof::FoldObserver {
 public:
  Mirror(std::vector<SegmentRec>& segs, std::uint32_t stream) : segs_(segs), stream_(stream) {}

  void segment_added(const prof::FoldSegment& f) override {
    SegmentRec s;
    s.stream = stream_;
    copy(f, s);
    segs_.insert(segment_at(segs_, f.addr), std::move(s));
  }
  void segment_changed(const prof::FoldSegment& f) override {
    auto it = segment_at(segs_, f.addr);
    if (it != segs_.end() && it->addr == f.addr) copy(f, *it);
  }
  void segment_removed(const prof::FoldSegment& f) override {
    auto it = segment_at(segs_, f.addr);
    if (it != segs_.end() && it->addr == f.addr) segs_.erase(it);
  }
  void block_added(std::uint64_t addr, const prof::FoldBlock& b) override {
    auto seg = find_segment(segs_, addr);
    if (seg == segs_.end()) return;
    seg->blocks.insert(block_at(seg->blocks, addr), BlockRec{addr, b.size, BlockState::Allocated});
  }
  void block_pending(std::uint64_t addr, const prof::FoldBlock&) override {
    if (BlockRec* r = find_block(addr)) r->state = BlockState::PendingFree;
  }
  void block_removed(std::uint64_t addr, const prof::FoldBlock&) override {
    auto seg = find_segment(segs_, addr);
    if (seg == segs_.end()) return;
    auto it = block_at(seg->blocks, addr);
    if (it != seg->blocks.end() && it->addr == addr) seg->blocks.erase(it);
  }

 private:
  static void copy(const prof::FoldSegment& f, SegmentRec& s) {
    s.addr = f.addr;
    s.size = f.size;
    s.expandable = f.virtual_range;
    s.mapped = f.mapped;
    s.mapped_bytes = f.mapped_bytes;
  }
  BlockRec* find_block(std::uint64_t addr) {
    auto seg = find_segment(segs_, addr);
    if (seg == segs_.end()) return nullptr;
    auto it = block_at(seg->blocks, addr);
    return it != seg->blocks.end() && it->addr == addr ? &*it : nullptr;
  }
  std::vector<SegmentRec>& segs_;
  std::uint32_t stream_;  // the event's: a new segment's owner
};

}  // namespace

void AllocatorState::apply(const AllocEvent& e) {
  Mirror m(segments, e.stream);
  fold.apply(e.op, e.addr, e.size, (e.flags & prof::kSegmentVirtualRange) != 0, &m);
  allocated = fold.allocated();
  pending_free = fold.pending_free();
  reserved = fold.reserved();
  virtual_reserved = fold.virtual_reserved();
  block_count = fold.live_blocks();
  unmatched = fold.contradictions();
}

}  // namespace memcomm::view
