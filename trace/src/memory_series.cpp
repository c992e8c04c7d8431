// memory_series: a rank's allocated/active/reserved over time, from the allocator's block events
// when their fold is complete, else from the samples (Note [Memory curves from block events] in
// allocator_fold.hpp), with expandable segments counted by their mapped bytes (Note [Virtual
// reservations] in virtual_reservations.hpp).
#include "memcomm/trace/analysis.hpp"
#include "memcomm/trace/allocator_fold.hpp"
#include "memcomm/trace/virtual_reservations.hpp"

namespace memcomm::prof {

namespace {

// The trace's guess (Note [Virtual reservations] in virtual_reservations.hpp).
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

// What the first passes learn: which metrics the rank samples, the device D its curves follow, and
// which of allocated/active/reserved come from D's fold (Note [Memory curves from block events]).
struct SeriesPlan {
  bool sampled[size_t(MemMetric::Count)] = {};
  int device = -1;  // D: of the level samples, else of the block events (better_curve_device)
  bool has_free_completed = false, has_blocks = false, has_segments = false;
  bool mid_run = false;     // a torch.profiler trace: it starts mid-run (RankTrace::from_torch_profiler)
  bool fold_level[3] = {};  // allocated, active, reserved
};

void find_device(const RankTrace& r, SeriesPlan& plan) {
  int block_device = -1;
  for (const Event& e : r.events) {
    if (e.kind == EventKind::MemSample) {
      const auto s = e.as<MemSampleEvent>();
      if (s.metric < MemMetric::Count) plan.sampled[size_t(s.metric)] = true;
      if (is_level_metric(s.metric) && better_curve_device(plan.device, s.device)) plan.device = s.device;
    } else if (is_block_kind(e.kind) && better_curve_device(block_device, e.as<MemBlockEvent>().device)) {
      block_device = e.as<MemBlockEvent>().device;
    }
  }
  plan.mid_run = r.from_torch_profiler;
  if (plan.device < 0) plan.device = block_device;
  for (const Event& e : r.events) {
    if (!is_block_kind(e.kind) || e.as<MemBlockEvent>().device != plan.device) continue;
    plan.has_free_completed |= e.kind == EventKind::FreeCompleted;
    plan.has_blocks |= e.kind == EventKind::Alloc;
    plan.has_segments |= e.kind == EventKind::SegmentAlloc || e.kind == EventKind::SegmentMap;
  }
}

// Whether D's fold is complete: the trace starts with the run, no drops, and nothing in it
// contradicts what it folded.
bool fold_is_complete(const RankTrace& r, const SeriesPlan& plan, const VirtualReservations& virtual_segment) {
  if (r.drops != 0 || plan.mid_run) return false;
  if (!plan.has_blocks && !plan.has_segments) return true;
  AllocatorFold fold({plan.has_free_completed, false});
  size_t segment_event = 0;
  for (const Event& e : r.events) {
    if (!is_block_kind(e.kind)) continue;
    const bool segment = e.kind == EventKind::SegmentAlloc || e.kind == EventKind::SegmentFree;
    const bool virt = segment && virtual_segment.is_virtual(segment_event++);
    const auto b = e.as<MemBlockEvent>();
    if (b.device == plan.device && fold.apply(e.kind, b.addr(), b.size(), virt) != FoldCheck::Ok) break;
  }
  return !fold.broken();
}

SeriesPlan plan_series(const RankTrace& r, const VirtualReservations& virtual_segment) {
  SeriesPlan plan;
  find_device(r, plan);
  const bool complete = fold_is_complete(r, plan, virtual_segment);
  const MemMetric levels[3] = {MemMetric::Allocated, MemMetric::Active, MemMetric::Reserved};
  const bool has[3] = {plan.has_blocks, plan.has_blocks, plan.has_segments};
  for (int k = 0; k < 3; ++k) {
    plan.fold_level[k] = has[k] && (complete || !plan.sampled[size_t(levels[k])]);
    if (plan.fold_level[k]) plan.sampled[size_t(levels[k])] = false;
  }
  return plan;
}

void apply_sample(const MemSampleEvent& s, const SeriesPlan& plan, MemoryPoint& p, int64_t& frag_ppm) {
  switch (s.metric) {
    case MemMetric::Allocated: if (plan.sampled[size_t(MemMetric::Allocated)]) p.allocated = s.value; break;
    case MemMetric::Reserved: if (plan.sampled[size_t(MemMetric::Reserved)]) p.reserved = s.value; break;
    case MemMetric::Active: if (plan.sampled[size_t(MemMetric::Active)]) p.active = s.value; break;
    case MemMetric::LargestFree: p.largest_free = s.value; break;
    case MemMetric::Fragmentation: frag_ppm = int64_t(s.value); break;
    default: break;
  }
}

double fragmentation(const MemoryPoint& p, const SeriesPlan& plan, int64_t frag_ppm) {
  if (frag_ppm >= 0) return double(frag_ppm) / 1e6;
  if (plan.sampled[size_t(MemMetric::LargestFree)] && p.reserved > p.allocated)
    return 1.0 - double(p.largest_free) / double(p.reserved - p.allocated);
  return p.reserved > p.allocated && p.reserved > 0 ? double(p.reserved - p.allocated) / double(p.reserved) : 0.0;
}

// Events that share a time (a torch.profiler trace's microseconds: a temporary allocated and freed
// in one) make one point, the last state, unless a level fell: then the higher state stays a point of
// its own, so no momentary peak is lost (the viewer's counters keep every sample).
bool below(const MemoryPoint& p, const MemoryPoint& earlier) {
  return p.allocated < earlier.allocated || p.active < earlier.active || p.reserved < earlier.reserved;
}

}  // namespace

std::vector<MemoryPoint> memory_series(const RankTrace& r) {
  const VirtualReservations virtual_segment = virtual_reservations(r);  // Note [Virtual reservations]
  // Note [Memory curves from block events] (allocator_fold.hpp), the rule the viewer follows too:
  // device D's fold replaces a sampled level only when it is complete, which takes a first pass.
  const SeriesPlan plan = plan_series(r, virtual_segment);
  AllocatorFold fold({plan.has_free_completed, false});
  size_t segment_event = 0;
  std::vector<MemoryPoint> out;
  MemoryPoint p{};
  int64_t frag_ppm = -1;
  for (const Event& e : r.events) {
    if (family_of(e.kind) != EventFamily::Memory || e.kind == EventKind::Oom) continue;
    if (e.kind == EventKind::MemSample) {
      const auto s = e.as<MemSampleEvent>();
      if (s.device != plan.device) continue;  // the curves describe D only
      apply_sample(s, plan, p, frag_ppm);
    } else {
      const bool segment = e.kind == EventKind::SegmentAlloc || e.kind == EventKind::SegmentFree;
      const bool virt = segment && virtual_segment.is_virtual(segment_event++);
      const auto b = e.as<MemBlockEvent>();
      if (b.device != plan.device) continue;  // another device's memory: not D's curves
      fold.apply(e.kind, b.addr(), b.size(), virt);
      if (plan.fold_level[0]) p.allocated = fold.allocated();
      if (plan.fold_level[1]) p.active = fold.active();
      if (plan.fold_level[2]) p.reserved = fold.reserved();
    }
    p.ts = e.ts;
    p.fragmentation = fragmentation(p, plan, frag_ppm);
    if (!out.empty() && out.back().ts == p.ts && !below(p, out.back())) out.back() = p; else out.push_back(p);
  }
  return out;
}

}  // namespace memcomm::prof
