// memory_series: a rank's allocated/active/reserved over time, from the allocator's block events
// when their fold is complete, else from the samples (Note [Memory curves from block events] in
// memory_fold.hpp), with expandable segments counted by their mapped bytes (Note [Virtual reservations]).
#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/memory_fold.hpp"

namespace memcomm::prof {

size_t VirtualReservations::add(EventKind kind, uint64_t addr, uint64_t size, bool flagged) {
  if (kind == EventKind::SegmentAlloc) {
    live_[addr] = {addr + size, instance_virtual_.size()};
    instance_of_.push_back(instance_virtual_.size());
    instance_virtual_.push_back(flagged);
    return instance_of_.size() - 1;
  }
  if (kind == EventKind::SegmentFree) {
    auto it = live_.find(addr);
    if (it != live_.end()) {  // the release of a segment seen: what that segment turned out to be
      instance_of_.push_back(it->second.instance);
      live_.erase(it);
    } else {  // allocated before the trace began: only its own flag can tell
      instance_of_.push_back(instance_virtual_.size());
      instance_virtual_.push_back(flagged);
    }
    return instance_of_.size() - 1;
  }
  if (kind == EventKind::SegmentMap) {
    auto it = live_.upper_bound(addr);
    if (it != live_.begin() && addr < (--it)->second.end) instance_virtual_[it->second.instance] = true;
  }
  return kNoIndex;
}

namespace {

// Note [Virtual reservations]: an expandable segment is a SegmentAlloc of its whole virtual range
// (e.g. 128 GiB) followed by SegmentMap/SegmentUnmap of the parts backed by memory. Reserved bytes
// are the backed ones, so a virtual reservation counts for nothing (its maps count), while a plain
// segment counts whole. memcomm's allocator flags its reservations (MemBlockEvent::virtual_range());
// for traces without the flag, a SegmentAlloc that any map lands in is taken for one, and so is the
// SegmentFree that releases it. The guess misses a reservation that is never mapped, which the flag
// gets right; a SegmentFree of a segment allocated before the trace has only its own flag.
// VirtualReservations (memory_fold.hpp) is that rule, for this file and memcomm-replay alike.
VirtualReservations virtual_reservations(const RankTrace& r) {
  VirtualReservations guess;
  for (const Event& e : r.events) {
    if (e.kind != EventKind::SegmentAlloc && e.kind != EventKind::SegmentFree && e.kind != EventKind::SegmentMap) continue;
    const auto b = e.as<MemBlockEvent>();
    guess.add(e.kind, b.addr(), b.size(), b.virtual_range());
  }
  return guess;
}

bool is_block_kind(EventKind k) { return k >= EventKind::Alloc && k <= EventKind::SegmentUnmap; }

}  // namespace

std::vector<MemoryPoint> memory_series(const RankTrace& r) {
  const VirtualReservations virtual_segment = virtual_reservations(r);  // Note [Virtual reservations]
  // Note [Memory curves from block events] (memory_fold.hpp), the rule the viewer follows too:
  // device D's fold replaces a sampled level only when it is complete, which takes a first pass.
  bool sampled[size_t(MemMetric::Count)] = {};
  int device = -1;            // D: of the first level sample, else of the first block event
  int first_block_device = -1;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::MemSample) {
      const auto s = e.as<MemSampleEvent>();
      if (s.metric < MemMetric::Count) sampled[size_t(s.metric)] = true;
      if (device < 0 && (s.metric == MemMetric::Allocated || s.metric == MemMetric::Active || s.metric == MemMetric::Reserved))
        device = s.device;
    } else if (first_block_device < 0 && is_block_kind(e.kind)) {
      first_block_device = e.as<MemBlockEvent>().device;
    }
  }
  if (device < 0) device = first_block_device;
  bool has_free_completed = false, has_blocks = false, has_segments = false;
  for (const Event& e : r.events) {
    if (!is_block_kind(e.kind) || e.as<MemBlockEvent>().device != device) continue;
    has_free_completed |= e.kind == EventKind::FreeCompleted;
    has_blocks |= e.kind == EventKind::Alloc;
    has_segments |= e.kind == EventKind::SegmentAlloc || e.kind == EventKind::SegmentMap;
  }
  MemoryFold fold(has_free_completed);
  bool complete = r.drops == 0;
  if (complete && (has_blocks || has_segments)) {
    size_t segment_event = 0;
    for (const Event& e : r.events) {
      if (!is_block_kind(e.kind)) continue;
      const bool segment = e.kind == EventKind::SegmentAlloc || e.kind == EventKind::SegmentFree;
      const bool virt = segment && virtual_segment.is_virtual(segment_event++);
      const auto b = e.as<MemBlockEvent>();
      if (b.device == device && !fold.apply(e.kind, b.addr(), b.size(), virt)) break;
    }
    complete = !fold.broken();
  }
  const bool fold_level[3] = {has_blocks && (complete || !sampled[size_t(MemMetric::Allocated)]),
                              has_blocks && (complete || !sampled[size_t(MemMetric::Active)]),
                              has_segments && (complete || !sampled[size_t(MemMetric::Reserved)])};
  if (fold_level[0]) sampled[size_t(MemMetric::Allocated)] = false;
  if (fold_level[1]) sampled[size_t(MemMetric::Active)] = false;
  if (fold_level[2]) sampled[size_t(MemMetric::Reserved)] = false;
  fold.reset(has_free_completed);
  size_t segment_event = 0;
  std::vector<MemoryPoint> out;
  MemoryPoint p{};
  int64_t frag_ppm = -1;
  for (const Event& e : r.events) {
    if (family_of(e.kind) != EventFamily::Memory || e.kind == EventKind::Oom) continue;
    if (e.kind == EventKind::MemSample) {
      const auto s = e.as<MemSampleEvent>();
      if (s.device != device) continue;  // the curves describe D only
      switch (s.metric) {
        case MemMetric::Allocated: if (sampled[size_t(MemMetric::Allocated)]) p.allocated = s.value; break;
        case MemMetric::Reserved: if (sampled[size_t(MemMetric::Reserved)]) p.reserved = s.value; break;
        case MemMetric::Active: if (sampled[size_t(MemMetric::Active)]) p.active = s.value; break;
        case MemMetric::LargestFree: p.largest_free = s.value; break;
        case MemMetric::Fragmentation: frag_ppm = int64_t(s.value); break;
        default: break;
      }
    } else {
      const bool segment = e.kind == EventKind::SegmentAlloc || e.kind == EventKind::SegmentFree;
      const bool virt = segment && virtual_segment.is_virtual(segment_event++);
      const auto b = e.as<MemBlockEvent>();
      if (b.device != device) continue;  // another device's memory: not D's curves
      fold.apply(e.kind, b.addr(), b.size(), virt);
      if (fold_level[0]) p.allocated = fold.allocated();
      if (fold_level[1]) p.active = fold.active();
      if (fold_level[2]) p.reserved = fold.reserved();
    }
    p.ts = e.ts;
    if (frag_ppm >= 0) {
      p.fragmentation = double(frag_ppm) / 1e6;
    } else if (sampled[size_t(MemMetric::LargestFree)] && p.reserved > p.allocated) {
      p.fragmentation = 1.0 - double(p.largest_free) / double(p.reserved - p.allocated);
    } else {
      p.fragmentation = p.reserved > p.allocated && p.reserved > 0 ? double(p.reserved - p.allocated) / double(p.reserved) : 0.0;
    }
    if (!out.empty() && out.back().ts == p.ts) out.back() = p; else out.push_back(p);
  }
  return out;
}

}  // namespace memcomm::prof
