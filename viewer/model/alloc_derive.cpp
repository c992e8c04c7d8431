// The allocator-derived parts of TimelineBuilder::append_to(): expandable-segment marks, OOM
// markers, memory curves and per-category curves, continued from the state of the last append
// (Note [Incremental append] in timeline_append.cpp).
//
// Memory curves (Note [Memory curves from block events] in trace/ allocator_fold.hpp, the rule
// memcomm-trace report's memory_series follows too): a rank's allocated/active/reserved curves are
// the fold of device D's block events where that fold is complete or the metric is not sampled;
// otherwise its samples. The samples a fold replaces are kept as "sampled:allocated", ... (not
// drawn). How the viewer folds:
//   - a rank that samples some memory metric (memcomm traces) folds D's events with prof::AllocatorFold
//     (Note [Allocator fold rules]: the live blocks and segments by address, which is what tells a
//     complete fold from one that saw frees of blocks it never saw), reading its levels. An event that leaves a curve unchanged
//     adds no sample to it (a counter is a step function): ~2 samples per alloc/free pair.
//     A fold that breaks (or a rank that reports drops, or a time-range load that cut block events
//     before its start: blocks_cut) gives the sampled curves back their names, also in live mode.
//   - a rank that samples nothing (snapshots, fixtures) has nothing to fall back to: its events of
//     D go through AllocatorState (the same fold, mirrored into sorted blocks), which also gives
//     "largest_free" and "fragmentation" (at intervals: they cost O(blocks) per point; deriving them
//     on a 10 M-event trace that samples allocated/reserved cost ~20% of its load, so they are
//     derived only when nothing is sampled). The fold makes implicit segments for blocks with none,
//     so such a rank gets all three curves.
#include "append_parts.hpp"

#include <memcomm/view/builder.hpp>

#include <algorithm>
#include <string>
#include <iterator>

namespace memcomm::view {
namespace {

using prof::EventKind;

// The curves one fold of derive_level_curves() writes, and what it learns on the way.
struct LevelFold {
  CounterSeries* c[5] = {};  // kDerivedMemory's curves; null: not derived from the events (now)
  double last[kLevelCurves] = {-1.0, -1.0, -1.0};  // last value of each level curve (-1: none yet)
  std::size_t first_new[kLevelCurves] = {};         // each level curve's first sample of this fold
  bool folded_any = false;   // some event of the device was folded
  bool skipped = false;      // some Alloc from the fold's start on was not seen by the fold
  std::uint8_t label = 0;    // the categories of the folded Allocs, OR-ed
};

// largest_free and fragmentation of the state at t.
void sample_free(const AllocatorState& st, LevelFold& lf, TimeNs t) {
  const double largest = static_cast<double>(st.largest_free());
  const double free_bytes = static_cast<double>(st.reserved) - static_cast<double>(st.allocated + st.pending_free);
  lf.c[3]->add(t, largest);
  lf.c[4]->add(t, free_bytes > 0 ? 1.0 - largest / free_bytes : 0.0);
}

// The fold of a rank that samples memory: prof::AllocatorFold's levels, from event `from` on.
// When the fold breaks, the curves that have samples go back to them (the caller republishes them).
// The loop works on local copies of `lf`'s fields (registers, not stores through a reference that
// CounterSeries::add() might alias): it runs once per allocator event of a load.
void fold_running_sums(const AllocEvents& ev, std::size_t from, int device, const bool sampled_level[kLevelCurves],
                       prof::AllocatorFold& f, LevelFold& lf) {
  CounterSeries* c[kLevelCurves] = {lf.c[0], lf.c[1], lf.c[2]};
  double last[kLevelCurves] = {lf.last[0], lf.last[1], lf.last[2]};
  bool folded_any = lf.folded_any, skipped = lf.skipped;
  std::uint8_t label = lf.label;
  const auto put = [&](int k, TimeNs t, std::uint64_t value) {
    const double v = static_cast<double>(value);
    if (c[k] && v != last[k]) c[k]->add(t, last[k] = v);
  };
  bool fresh = (c[0] && last[0] < 0) || (c[1] && last[1] < 0) || (c[2] && last[2] < 0);  // curves start at the first event
  bool was_broken = f.broken();
  for (std::size_t i = from; i < ev.size(); ++i) {
    const AllocEvent& e = ev[i];
    if (e.op == EventKind::Oom) continue;
    if (static_cast<int>(e.device) != device) {
      skipped = true;
      continue;
    }
    folded_any = true;
    if (e.op == EventKind::Alloc) label |= e.category;
    f.apply(e.op, e.addr, e.size, (e.flags & prof::kSegmentVirtualRange) != 0);
    if (f.broken() && !was_broken) {
      was_broken = true;
      for (int k = 0; k < kLevelCurves; ++k)
        if (sampled_level[k]) c[k] = nullptr;
      if (!c[0] && !c[1] && !c[2]) {
        skipped = true;
        break;
      }
    }
    // Each op checks only the curves it can move.
    switch (e.op) {
      case EventKind::Alloc:
        put(0, e.t, f.allocated());
        put(1, e.t, f.active());
        break;
      case EventKind::FreeRequested:
        put(0, e.t, f.allocated());
        if (!f.options().frees_complete) put(1, e.t, f.active());
        break;
      case EventKind::FreeCompleted:
        put(0, e.t, f.allocated());
        put(1, e.t, f.active());
        break;
      default:
        put(2, e.t, f.reserved());
        break;
    }
    if (fresh) {
      put(0, e.t, f.allocated());
      put(1, e.t, f.active());
      put(2, e.t, f.reserved());
      fresh = false;
    }
  }
  for (int k = 0; k < kLevelCurves; ++k) {
    lf.c[k] = c[k];
    lf.last[k] = last[k];
  }
  lf.folded_any = folded_any;
  lf.skipped = skipped;
  lf.label = label;
}

// The fold of a rank that samples nothing: through AllocatorState, the fold mirrored into sorted
// blocks (largest_free needs them), from event `from` on.
void fold_allocator_state(const AllocEvents& ev, std::size_t from, int device, AllocatorState& st, std::size_t& since,
                          LevelFold& lf) {
  for (std::size_t i = from; i < ev.size(); ++i) {
    const AllocEvent& e = ev[i];
    if (e.op != EventKind::Oom && static_cast<int>(e.device) != device) {
      lf.skipped = true;
      continue;
    }
    lf.folded_any = true;
    st.apply(e);
    if (e.op == EventKind::Alloc) lf.label |= e.category;
    // A counter is a step function (counter_lod.hpp): an event that leaves a curve as it was
    // adds no sample to it (a free request leaves active, a completion allocated, most events
    // reserved), which halves what the curves hold. Events of one time are one state, the last
    // (Note [Live means allocated] in trace/ allocations.hpp): in a snapshot, whose clock spaces its
    // events (Note [Event order within a microsecond]), they are the layout before the trace
    // (Note [A trace that starts mid-run]), whose blocks pending free pass through allocated. The
    // running-sums fold above keeps each event's sample instead: its ranks' curves are memcomm-trace
    // report's too, which keeps a momentary peak within one time (memory_series), and the two agree.
    const double v[kLevelCurves] = {static_cast<double>(st.allocated), static_cast<double>(st.allocated + st.pending_free),
                                    static_cast<double>(st.reserved)};
    for (int k = 0; k < kLevelCurves; ++k) {
      if (v[k] == lf.last[k]) continue;
      CounterSeries& c = *lf.c[k];
      if (c.size() > lf.first_new[k] && c.time(c.size() - 1) == e.t) c.truncate(c.size() - 1);
      c.add(e.t, lf.last[k] = v[k]);
    }
    // largest_free costs O(blocks): sample it at intervals that grow with the state, O(events) total.
    if (++since >= (st.block_count + st.segments.size()) / 4) {
      since = 0;
      sample_free(st, lf, e.t);
    }
  }
}

// Publishes level curve k ("allocated", ...) from the events, the sampled series renamed
// "sampled:..." and kept, or gives the samples their name back. Sets `added` on a change.
void publish_level_source(RankData& rd, bool& from_events, int k, bool events, bool& added) {
  if (from_events == events) return;
  from_events = events;
  const std::string name = kDerivedMemory[k];
  if (events) {
    for (auto& c : rd.counters)
      if (c.name() == name) c.rename(kSampledPrefix + name);
  } else {
    rd.counters.erase(std::remove_if(rd.counters.begin(), rd.counters.end(), [&](const CounterSeries& c) { return c.name() == name; }),
                      rd.counters.end());
    for (auto& c : rd.counters)
      if (c.name() == kSampledPrefix + name) c.rename(name);
  }
  added = true;  // re-sorted by the caller
}

}  // namespace

void TimelineBuilder::note_kind(AllocDerive& d, const AllocEvent& e) {
  if (static_cast<int>(e.device) != d.device) return;
  d.has_alloc |= e.op == EventKind::Alloc;
  d.has_segments |= e.op == EventKind::SegmentAlloc || e.op == EventKind::SegmentMap;
  d.completes |= e.op == EventKind::FreeCompleted;
}

// Marks each SegmentAlloc that a later SegmentMap lands in (Note [Virtual reservations]). OOM
// markers are collected in the same pass (these arrays are a fifth of a trace: one pass), and what
// the device's events carry is noted. Returns where the curves must be folded from: 0 when a
// segment already folded turned out expandable.
std::size_t TimelineBuilder::mark_expandable(RankData& rd, AllocDerive& d, std::size_t from) {
  auto& ev = rd.alloc_events;
  if (from == 0) d.open.clear();
  std::size_t refold = from;
  std::vector<TimeNs> ooms;
  for (std::size_t i = from; i < ev.size(); ++i) {
    AllocEvent& e = ev[i];
    note_kind(d, e);
    if (e.op == EventKind::Alloc || e.op == EventKind::FreeRequested || e.op == EventKind::FreeCompleted) continue;
    if (e.op == EventKind::Oom) {
      ooms.push_back(e.t);
    } else if (e.op == EventKind::SegmentAlloc && !(e.flags & prof::kSegmentVirtualRange)) {
      d.open[e.addr] = {e.size, i};
    } else if (e.op == EventKind::SegmentFree) {
      d.open.erase(e.addr);
    } else if (e.op == EventKind::SegmentMap) {
      auto it = d.open.upper_bound(e.addr);
      if (it != d.open.begin() && e.addr < std::prev(it)->first + std::prev(it)->second.first) {
        --it;
        ev[it->second.second].flags |= prof::kSegmentVirtualRange;
        refold = std::min(refold, it->second.second);
        d.open.erase(it);
      }
    }
  }
  if (refold < from) {
    from = 0;
    ooms.clear();
    for (std::size_t i = 0; i < ev.size(); ++i)
      if (ev[i].op == EventKind::Oom) ooms.push_back(ev[i].t);
  }
  if (from == 0) rd.ooms.clear();
  rd.ooms.insert(rd.ooms.end(), ooms.begin(), ooms.end());
  return from;
}

// Memory curves from the block events (Note [Memory curves from block events]). `restart`: the
// device or what its events carry changed, so the fold starts again from the first event.
TimelineBuilder::LabelScan TimelineBuilder::derive_level_curves(RankData& rd, RankParts& p, std::size_t from, bool restart,
                                                                bool& added) {
  AllocDerive& d = p.derive;
  const auto& ev = rd.alloc_events;
  const bool with_free = !p.sampled_memory;  // largest_free/fragmentation: only when nothing is sampled
  const bool fast = !with_free;  // no O(blocks) free curves to sample: the fold's levels suffice
  std::size_t fold_from = d.derived ? from : 0;  // the first fold starts at the first event
  if ((with_free && !d.free_derived) || fast != d.fast || restart) fold_from = 0;
  // Which curves the events give (the rest stay the samples'): a broken fold stays broken until a
  // refold from the first event (late events may complete it).
  const bool trusted = rd.dropped == 0 && !p.blocks_cut && (fold_from == 0 || !d.fold.broken());
  const bool has[kLevelCurves] = {d.has_alloc, d.has_alloc, d.has_segments};
  for (int k = 0; k < kLevelCurves; ++k) {
    const bool want = with_free || (has[k] && (trusted || !p.sampled_level[k]));
    if (want && !d.from_events[k]) fold_from = 0;  // a curve taken over is built from the first event
    publish_level_source(rd, d.from_events[k], k, want, added);
  }
  const int n = with_free ? 5 : kLevelCurves;
  LevelFold lf;
  for (int k = 0; k < n; ++k)
    if (k >= kLevelCurves || d.from_events[k]) lf.c[k] = &counter_for(rd, kDerivedMemory[k], k == 4 ? "" : "B", added);
  d.derived = true;
  d.free_derived = with_free;
  d.fast = fast;
  if (fold_from == 0) {
    for (int k = 0; k < n; ++k)
      if (lf.c[k]) lf.c[k]->clear();
    d.state = AllocatorState({d.completes, false});
    d.since = 0;
    d.provisional = false;
    d.fold.reset({d.completes, false});
  }
  if (d.provisional) {  // the last sample stood for "now": the new events continue from before it
    lf.c[3]->truncate(lf.c[3]->size() - 1);
    lf.c[4]->truncate(lf.c[4]->size() - 1);
    d.provisional = false;
  }
  std::size_t n0[5] = {};
  for (int k = 0; k < n; ++k)
    if (lf.c[k]) n0[k] = lf.c[k]->size();
  for (int k = 0; k < kLevelCurves; ++k) {
    lf.first_new[k] = n0[k];
    if (lf.c[k] && lf.c[k]->size()) lf.last[k] = lf.c[k]->value(lf.c[k]->size() - 1);
  }
  const bool levels = lf.c[0] || lf.c[1] || lf.c[2];
  lf.skipped = fast && !levels;  // then no fold sees the Allocs from `from` on
  if (fast && levels) fold_running_sums(ev, fold_from, d.device, p.sampled_level, d.fold, lf);
  else if (!fast) fold_allocator_state(ev, fold_from, d.device, d.state, d.since, lf);
  if (with_free && d.since != 0 && lf.folded_any) {  // the curve reaches the last event
    sample_free(d.state, lf, ev.back().t);
    d.provisional = true;
  }
  for (int k = 0; k < n; ++k)
    if (lf.c[k]) lf.c[k]->update_levels(std::min(n0[k], lf.c[k]->size()));
  if (fast && d.fold.broken())
    for (int k = 0; k < kLevelCurves; ++k)
      if (p.sampled_level[k]) publish_level_source(rd, d.from_events[k], k, false, added);
  return {fold_from <= from && !lf.skipped, lf.label};  // known: the fold saw every Alloc from `from` on
}

// Per-category allocated bytes ("cat:parameter", ...) when the trace labels blocks; frees find
// their block's category by address (they may not carry it).
void TimelineBuilder::derive_category_curves(RankData& rd, AllocDerive& d, std::size_t from, LabelScan labels, bool& added) {
  const auto& ev = rd.alloc_events;
  std::size_t cat_from = from;
  if (!d.labelled) {
    if (labels.known) d.labelled = labels.categories != 0;
    for (std::size_t i = from; i < ev.size() && !d.labelled && !labels.known; ++i)
      d.labelled = ev[i].op == EventKind::Alloc && ev[i].category != 0;
    if (d.labelled) cat_from = 0;  // the unlabelled blocks before count as "unknown"
  }
  if (!d.labelled) return;
  if (cat_from == 0) {
    d.live.clear();
    std::fill(std::begin(d.bytes), std::end(d.bytes), 0.0);
    for (auto& c : rd.counters)
      if (c.name().rfind("cat:", 0) == 0) c.clear();
  }
  CounterSeries* cats[kMemCategoryCount] = {};
  std::size_t n0[kMemCategoryCount] = {};
  for (std::size_t i = cat_from; i < ev.size(); ++i) {
    const AllocEvent& e = ev[i];
    int changed = -1;
    if (e.op == EventKind::Alloc) {
      const std::uint8_t c = e.category < kMemCategoryCount ? e.category : 0;
      d.live[e.addr] = {c, e.size};
      d.bytes[c] += static_cast<double>(e.size);
      changed = c;
    } else if (e.op == EventKind::FreeRequested || e.op == EventKind::FreeCompleted) {
      auto it = d.live.find(e.addr);
      if (it == d.live.end()) continue;
      changed = it->second.first;
      d.bytes[changed] -= static_cast<double>(it->second.second);
      d.live.erase(it);
    }
    if (changed < 0) continue;
    auto& slot_c = cats[changed];
    if (slot_c == nullptr) {
      slot_c = &counter_for(rd, std::string("cat:") + kMemCategoryNames[changed], "B", added);
      n0[changed] = slot_c->size();
    }
    slot_c->add(e.t, d.bytes[changed]);
  }
  for (int k = 0; k < kMemCategoryCount; ++k)
    if (cats[k]) cats[k]->update_levels(n0[k]);
}

void TimelineBuilder::derive_alloc(RankData& rd, RankParts& p, std::size_t from, AppendResult& r, std::uint32_t slot) {
  const auto& ev = rd.alloc_events;
  AllocDerive& d = p.derive;
  // The device the curves describe (Note [Memory curves from block events]): the samples', else
  // the block events' (a GPU's over the host's). What its events carry (Alloc, segments,
  // FreeCompleted) is noted by mark_expandable(), or from the start when the device changed (live:
  // samples came after the events, or a GPU's after the host's).
  int device = p.sample_device;
  if (device < 0) {  // the new events may name a better device than the earlier ones did
    device = d.device;
    for (std::size_t i = d.device < 0 ? 0 : from; i < ev.size() && (device < 0 || device == prof::kHostDevice); ++i)
      if (ev[i].op != EventKind::Oom && prof::better_curve_device(device, ev[i].device)) device = ev[i].device;
  }
  const bool new_device = device != d.device;
  const bool completes_before = d.completes;
  if (new_device) {
    d.device = device;
    d.has_alloc = d.has_segments = d.completes = false;
    for (std::size_t i = 0; i < from; ++i) note_kind(d, ev[i]);
  }
  from = mark_expandable(rd, d, from);
  bool added = false;
  rd.counters.reserve(rd.counters.size() + 5 + kMemCategoryCount);  // the curves' pointers stay valid
  // Whether an Alloc from `from` on carries a category, found by the fold when it runs over those
  // events (the events are ~70 MB on a 10 M-event trace: one pass over them, not two).
  LabelScan labels;
  if (d.blocks) labels = derive_level_curves(rd, p, from, new_device || d.completes != completes_before, added);
  derive_category_curves(rd, d, from, labels, added);
  if (added) sort_counters(rd);
  r.alloc_from[slot] = std::min(r.alloc_from[slot], from);
}

}  // namespace memcomm::view
