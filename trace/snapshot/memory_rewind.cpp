// See memory_rewind.hpp and Note [Rewinding to an OOM].
#include "memcomm/snapshot/memory_rewind.hpp"

#include <algorithm>

namespace memcomm::snapshot {

using prof::EventKind;

namespace {
std::uint64_t round_block(std::uint64_t size) { return (std::max<std::uint64_t>(size, 1) + 511) / 512 * 512; }
}  // namespace

MemoryRewind::MemoryRewind(const Snapshot& snap, int device) : requests_recorded_(snap.free_requests_recorded()) {
  for (const auto& s : snap.segments) {
    if (s.device != device) continue;
    back(s.address, s.total_size, s.is_expandable);
    for (const auto& b : s.blocks)
      if (b.is_active())
        blocks_[b.address] = ActiveBlock{b.size, b.requested_size ? b.requested_size : b.size, s.stream,
                                         b.state == BlockState::active_pending_free};
  }
}

void MemoryRewind::undo(const Event& e) {
  switch (e.kind) {
    case EventKind::Alloc:
      if (!blocks_.erase(e.addr)) ++contradictions_;
      break;
    case EventKind::FreeCompleted:  // before it, the block was held for its stream, or by the user where
                                    // no request is recorded (Note [A history without free requests])
      if (!blocks_.emplace(e.addr, ActiveBlock{round_block(e.size), e.size, e.stream, requests_recorded_}).second)
        ++contradictions_;
      break;
    case EventKind::FreeRequested:  // before it, the user held the block
      if (auto it = blocks_.find(e.addr); it != blocks_.end()) it->second.pending = false;
      break;
    case EventKind::SegmentAlloc:
    case EventKind::SegmentMap: unback(e.addr, e.size); break;
    case EventKind::SegmentFree: back(e.addr, e.size, false); break;
    case EventKind::SegmentUnmap: back(e.addr, e.size, true); break;
    default: break;  // oom, markers: the layout is the same before them
  }
}

// Adds [addr, addr + size) as backed; a joining range absorbs joining neighbours it touches.
void MemoryRewind::back(std::uint64_t addr, std::uint64_t size, bool joins) {
  if (size == 0) return;
  std::uint64_t begin = addr, end = addr + size;
  if (joins) {
    auto next = backed_.find(end);
    if (next != backed_.end() && next->second.joins) end = next->second.end, backed_.erase(next);
    auto prev = backed_.lower_bound(begin);
    if (prev != backed_.begin() && (--prev)->second.end == begin && prev->second.joins) {
      begin = prev->first;
      backed_.erase(prev);
    }
  }
  if (backed_.count(begin)) ++contradictions_;  // backed twice: keep the later range
  backed_[begin] = Range{end, joins};
}

// Removes [addr, addr + size) from whichever backed ranges overlap it, splitting them.
void MemoryRewind::unback(std::uint64_t addr, std::uint64_t size) {
  const std::uint64_t end = addr + size;
  bool found = false;
  auto it = backed_.lower_bound(addr);
  if (it != backed_.begin()) --it;
  while (it != backed_.end() && it->first < end) {
    const auto [b, r] = *it;
    it = std::next(it);
    if (r.end <= addr) continue;
    found = true;
    backed_.erase(b);
    if (b < addr) backed_[b] = Range{addr, r.joins};
    if (r.end > end) backed_[end] = Range{r.end, r.joins};
  }
  if (!found) ++contradictions_;
}

std::uint64_t MemoryRewind::largest_gap(std::uint64_t begin, std::uint64_t end) const {
  std::uint64_t best = 0, at = begin;
  auto it = blocks_.lower_bound(begin);
  if (it != blocks_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > begin)  // a block reaching in
    at = std::min(end, std::prev(it)->first + std::prev(it)->second.bytes);
  for (; it != blocks_.end() && it->first < end; ++it) {
    if (it->first > at) best = std::max(best, it->first - at);
    at = std::max(at, std::min(end, it->first + it->second.bytes));
  }
  return std::max(best, end > at ? end - at : 0);
}

MemoryLevels MemoryRewind::levels() const {
  MemoryLevels m;
  for (const auto& [addr, b] : blocks_) m.live += b.bytes;
  for (const auto& [begin, r] : backed_) {
    m.reserved += r.end - begin;
    m.largest_free = std::max(m.largest_free, largest_gap(begin, r.end));
  }
  return m;
}

}  // namespace memcomm::snapshot
