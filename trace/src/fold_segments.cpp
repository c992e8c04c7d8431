// AllocatorFold's segments (Note [Allocator fold rules] in allocator_fold.hpp): segments by address,
// each with its backed ranges when it is a virtual reservation; a block or map finds the segment
// that contains it through the last one found, else one ordered-map search.
#include <memcomm/trace/allocator_fold.hpp>

#include <algorithm>
#include <iterator>

namespace memcomm::prof {
namespace {

// Adds [b, e) to sorted, disjoint, non-touching ranges; returns the bytes newly covered.
uint64_t add_range(std::vector<AddrRange>& rs, uint64_t b, uint64_t e) {
  if (e <= b) return 0;
  // First range that ends at or after b (touching ranges coalesce).
  auto lo = std::lower_bound(rs.begin(), rs.end(), b, [](const AddrRange& r, uint64_t v) { return r.end < v; });
  uint64_t covered = 0, nb = b, ne = e;
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
uint64_t remove_range(std::vector<AddrRange>& rs, uint64_t b, uint64_t e) {
  if (e <= b) return 0;
  uint64_t removed = 0;
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

FoldSegment* AllocatorFold::containing(uint64_t addr) {
  FoldSegment* h = hint_.at;
  if (h != nullptr && addr >= h->addr && addr - h->addr < h->size) return h;
  auto it = segments_.upper_bound(addr);
  if (it == segments_.begin()) return nullptr;
  --it;
  if (addr - it->second.addr >= it->second.size) return nullptr;
  return hint_.at = &it->second;
}

FoldSegment& AllocatorFold::add_segment(uint64_t addr, uint64_t size, bool virtual_range, FoldObserver* obs) {
  FoldSegment& s = segments_[addr];
  s.addr = addr;
  s.size = size;
  s.virtual_range = virtual_range;
  (virtual_range ? virtual_reserved_ : reserved_) += size;
  if (obs) obs->segment_added(s);
  return s;
}

FoldCheck AllocatorFold::segment_alloc(uint64_t addr, uint64_t size, bool virtual_range, FoldObserver* obs) {
  if (segments_.count(addr)) return FoldCheck::Conflict;  // allocated twice: keep the first
  add_segment(addr, size, virtual_range, obs);
  return FoldCheck::Ok;
}

FoldCheck AllocatorFold::segment_free(uint64_t addr, FoldObserver* obs) {
  auto it = segments_.find(addr);
  if (it == segments_.end()) return FoldCheck::Unknown;
  FoldSegment& s = it->second;
  const FoldCheck c = s.live_blocks == 0 ? FoldCheck::Ok : FoldCheck::Conflict;
  if (s.live_blocks != 0) end_blocks_in(s, obs);  // freed with live blocks: they end with it
  reserved_ -= s.backed();
  if (s.virtual_range) virtual_reserved_ -= s.size;
  if (obs) obs->segment_removed(s);
  if (hint_.at == &s) hint_.at = nullptr;
  segments_.erase(it);
  return c;
}

void AllocatorFold::end_blocks_in(const FoldSegment& s, FoldObserver* obs) {
  std::vector<uint64_t> live;  // addresses first: ending a block may sweep the map
  for (const auto& [addr, b] : blocks_)
    if (b.live() && addr >= s.addr && addr - s.addr < s.size) live.push_back(addr);
  std::sort(live.begin(), live.end());
  for (uint64_t a : live) end_block(blocks_.find(a), obs);
}

// The segment a map at addr backs: the enclosing one (turned virtual if it was not marked), else an
// implicit virtual one that the map starts or extends. Null when the map would overlap the next segment.
FoldSegment* AllocatorFold::segment_to_map(uint64_t addr, uint64_t size, FoldObserver* obs) {
  if (FoldSegment* s = containing(addr)) {
    if (!s->virtual_range) {  // reserved before we knew: now we do
      reserved_ -= s->size;
      virtual_reserved_ += s->size;
      s->virtual_range = true;
    }
    return s;
  }
  auto after = segments_.upper_bound(addr);
  const bool room = after == segments_.end() || after->second.addr >= addr + size;
  if (after != segments_.begin() && room) {
    FoldSegment& prev = std::prev(after)->second;
    if (prev.virtual_range && prev.addr + prev.size == addr) {  // continues an implicit virtual segment
      prev.size += size;
      virtual_reserved_ += size;
      return &prev;
    }
  }
  if (!room) return nullptr;
  return &add_segment(addr, size, true, obs);
}

FoldCheck AllocatorFold::map(uint64_t addr, uint64_t size, FoldObserver* obs) {
  FoldSegment* s = segment_to_map(addr, size, obs);
  if (s == nullptr) return FoldCheck::Conflict;
  const uint64_t end = std::min(addr + size, s->addr + s->size);
  const uint64_t added = add_range(s->mapped, addr, end);
  s->mapped_bytes += added;
  reserved_ += added;
  if (obs) obs->segment_changed(*s);
  return added == size ? FoldCheck::Ok : FoldCheck::Conflict;  // mapped twice, or past the reservation
}

FoldCheck AllocatorFold::unmap(uint64_t addr, uint64_t size, FoldObserver* obs) {
  FoldSegment* s = containing(addr);
  if (s == nullptr || !s->virtual_range) return FoldCheck::Conflict;
  const uint64_t removed = remove_range(s->mapped, addr, addr + size);
  s->mapped_bytes -= removed;
  reserved_ -= removed;
  if (obs) obs->segment_changed(*s);
  return removed == size ? FoldCheck::Ok : FoldCheck::Conflict;
}

}  // namespace memcomm::prof
