// The allocator-derived parts of TimelineBuilder::append_to(): expandable-segment marks, OOM
// markers, memory curves and per-category curves, continued from the state of the last append
// (Note [Incremental append] in timeline_append.cpp).
//
// Memory curves (Note [Memory curves from block events] in profiler/core memory_fold.hpp, the rule
// memcomm-trace report's memory_series follows too): a rank's allocated/active/reserved curves are
// the fold of device D's block events where that fold is complete or the metric is not sampled;
// otherwise its samples. The samples a fold replaces are kept as "sampled:allocated", ... (not
// drawn). How the viewer folds:
//   - a rank that samples some memory metric (memcomm traces) folds D's events with prof::MemoryFold
//     (running sums plus the live blocks and segments by address, which is what tells a complete
//     fold from one that saw frees of blocks it never saw). An event that leaves a curve unchanged
//     adds no sample to it (a counter is a step function): ~2 samples per alloc/free pair.
//     A fold that breaks (or a rank that reports drops, or a time-range load that cut block events
//     before its start: blocks_cut) gives the sampled curves back their names, also in live mode.
//   - a rank that samples nothing (snapshots, fixtures) has nothing to fall back to: its events of
//     D go through AllocatorState, as the allocator state view folds them, which also gives
//     "largest_free" and "fragmentation" (at intervals: they cost O(blocks) per point; deriving them
//     on a 10 M-event trace that samples allocated/reserved cost ~20% of its load, so they are
//     derived only when nothing is sampled). AllocatorState makes implicit segments for blocks with
//     none, so such a rank gets all three curves. Both folds give the same curves on a complete
//     trace (tests/viewer/test_memory_curves.cpp).
#include "append_parts.hpp"

#include <memcomm/view/builder.hpp>

#include <algorithm>
#include <string>
#include <iterator>

namespace memcomm::view {

void TimelineBuilder::derive_alloc(RankData& rd, RankParts& p, std::size_t from, AppendResult& r, std::uint32_t slot) {
  auto& ev = rd.alloc_events;
  AllocDerive& d = p.derive;
  // The device the curves describe (Note [Memory curves from block events]): the samples', else
  // the first block event's. Its flags (Alloc, segments, FreeCompleted seen) are gathered with the
  // marks below, or from the start when the device changed (live: samples came after the events).
  int device = p.sample_device;
  for (std::size_t i = 0; device < 0 && i < ev.size(); ++i)
    if (ev[i].op != prof::EventKind::Oom) device = ev[i].device;
  const bool new_device = device != d.device;
  const bool completes_before = d.completes;
  const auto note_kind = [&d, device](const AllocEvent& e) {  // what the device's events carry
    if (static_cast<int>(e.device) != device) return;
    d.has_alloc |= e.op == prof::EventKind::Alloc;
    d.has_segments |= e.op == prof::EventKind::SegmentAlloc || e.op == prof::EventKind::SegmentMap;
    d.completes |= e.op == prof::EventKind::FreeCompleted;
  };
  if (new_device) {
    d.device = device;
    d.has_alloc = d.has_segments = d.completes = false;
    for (std::size_t i = 0; i < from; ++i) note_kind(ev[i]);
  }
  // Note [Expandable segments]: mark each SegmentAlloc that a later SegmentMap lands in.
  // OOM markers are collected in the same pass (these arrays are a fifth of a trace: one pass).
  if (from == 0) d.open.clear();
  std::size_t refold = from;
  std::vector<TimeNs> ooms;
  for (std::size_t i = from; i < ev.size(); ++i) {
    AllocEvent& e = ev[i];
    note_kind(e);
    if (e.op == prof::EventKind::Alloc || e.op == prof::EventKind::FreeRequested || e.op == prof::EventKind::FreeCompleted) continue;
    if (e.op == prof::EventKind::Oom) {
      ooms.push_back(e.t);
    } else if (e.op == prof::EventKind::SegmentAlloc && !(e.flags & prof::kSegmentVirtualRange)) {
      d.open[e.addr] = {e.size, i};
    } else if (e.op == prof::EventKind::SegmentFree) {
      d.open.erase(e.addr);
    } else if (e.op == prof::EventKind::SegmentMap) {
      auto it = d.open.upper_bound(e.addr);
      if (it != d.open.begin() && e.addr < std::prev(it)->first + std::prev(it)->second.first) {
        --it;
        ev[it->second.second].flags |= prof::kSegmentVirtualRange;
        refold = std::min(refold, it->second.second);
        d.open.erase(it);
      }
    }
  }
  if (refold < from) {  // a segment already folded turned out expandable
    from = 0;
    ooms.clear();
    for (std::size_t i = 0; i < ev.size(); ++i)
      if (ev[i].op == prof::EventKind::Oom) ooms.push_back(ev[i].t);
  }
  if (from == 0) rd.ooms.clear();
  rd.ooms.insert(rd.ooms.end(), ooms.begin(), ooms.end());
  bool added = false;
  rd.counters.reserve(rd.counters.size() + 5 + kMemCategoryCount);  // the pointers below stay valid
  // Whether an Alloc from `from` on carries a category, found by the fold below when it runs over
  // those events (the events are ~70 MB on a 10 M-event trace: one pass over them, not two).
  std::uint8_t label = 0;
  bool label_known = false;
  // Memory curves from the block events (Note [Memory curves from block events]).
  if (d.blocks) {
    const bool with_free = !p.sampled_memory;  // largest_free/fragmentation: only when nothing is sampled
    const bool fast = !with_free;  // no O(blocks) free curves to sample: MemoryFold suffices
    std::size_t fold_from = d.derived ? from : 0;  // the first fold starts at the first event
    if ((with_free && !d.free_derived) || fast != d.fast || new_device || d.completes != completes_before) fold_from = 0;
    // Which curves the events give (the rest stay the samples'): a broken fold stays broken until a
    // refold from the first event (late events may complete it).
    const bool trusted = rd.dropped == 0 && !p.blocks_cut && (fold_from == 0 || !d.fold.broken());
    const bool has[kLevelCurves] = {d.has_alloc, d.has_alloc, d.has_segments};
    bool want[kLevelCurves];
    for (int k = 0; k < kLevelCurves; ++k) {
      want[k] = with_free || (has[k] && (trusted || !p.sampled_level[k]));
      if (want[k] && !d.from_events[k]) fold_from = 0;  // a curve taken over is built from the first event
    }
    const auto set_source = [&](int k, bool events) {  // publishes curve k from the events or the samples
      if (d.from_events[k] == events) return;
      d.from_events[k] = events;
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
      added = true;  // re-sorted below
    };
    for (int k = 0; k < kLevelCurves; ++k) set_source(k, want[k]);
    const int n = with_free ? 5 : kLevelCurves;
    CounterSeries* c[5] = {};
    for (int k = 0; k < n; ++k)
      if (k >= kLevelCurves || d.from_events[k]) c[k] = &counter_for(rd, kDerivedMemory[k], k == 4 ? "" : "B", added);
    d.derived = true;
    d.free_derived = with_free;
    d.fast = fast;
    if (fold_from == 0) {
      for (int k = 0; k < n; ++k)
        if (c[k]) c[k]->clear();
      d.state = AllocatorState{};
      d.since = 0;
      d.provisional = false;
      d.fold.reset(d.completes);
    }
    if (d.provisional) {  // the last sample stood for "now": the new events continue from before it
      c[3]->truncate(c[3]->size() - 1);
      c[4]->truncate(c[4]->size() - 1);
      d.provisional = false;
    }
    std::size_t n0[5] = {};
    double last[kLevelCurves] = {-1.0, -1.0, -1.0};
    for (int k = 0; k < n; ++k)
      if (c[k]) n0[k] = c[k]->size();
    for (int k = 0; k < kLevelCurves; ++k)
      if (c[k] && c[k]->size()) last[k] = c[k]->value(c[k]->size() - 1);
    AllocatorState& st = d.state;
    const auto sample_free = [&](TimeNs t) {
      const double lf = static_cast<double>(st.largest_free());
      const double free_bytes = static_cast<double>(st.reserved) - static_cast<double>(st.allocated + st.pending_free);
      c[3]->add(t, lf);
      c[4]->add(t, free_bytes > 0 ? 1.0 - lf / free_bytes : 0.0);
    };
    bool folded_any = false;
    bool skipped = fast && !(c[0] || c[1] || c[2]);  // some Alloc from `from` on not seen by the fold
    if (fast && (c[0] || c[1] || c[2])) {
      prof::MemoryFold& f = d.fold;
      const auto put = [&](int k, TimeNs t, std::uint64_t value) {
        const double v = static_cast<double>(value);
        if (c[k] && v != last[k]) c[k]->add(t, last[k] = v);
      };
      bool fresh = (c[0] && last[0] < 0) || (c[1] && last[1] < 0) || (c[2] && last[2] < 0);  // curves start at the first event
      bool was_broken = f.broken();
      for (std::size_t i = fold_from; i < ev.size(); ++i) {
        const AllocEvent& e = ev[i];
        if (e.op == prof::EventKind::Oom) continue;
        if (static_cast<int>(e.device) != device) {
          skipped = true;
          continue;
        }
        folded_any = true;
        if (e.op == prof::EventKind::Alloc) label |= e.category;
        f.apply(e.op, e.addr, e.size, (e.flags & prof::kSegmentVirtualRange) != 0);
        if (f.broken() && !was_broken) {  // the curves that have samples go back to them (below)
          was_broken = true;
          for (int k = 0; k < kLevelCurves; ++k)
            if (p.sampled_level[k]) c[k] = nullptr;
          if (!c[0] && !c[1] && !c[2]) {
            skipped = true;
            break;
          }
        }
        // Each op checks only the curves it can move (this loop runs once per allocator event of a
        // load, a fifth of a trace).
        switch (e.op) {
          case prof::EventKind::Alloc:
            put(0, e.t, f.allocated());
            put(1, e.t, f.active());
            break;
          case prof::EventKind::FreeRequested:
            put(0, e.t, f.allocated());
            if (!f.frees_complete()) put(1, e.t, f.active());
            break;
          case prof::EventKind::FreeCompleted:
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
    } else if (!fast) {  // through AllocatorState, as the allocator state view folds them (largest_free needs the blocks)
      for (std::size_t i = fold_from; i < ev.size(); ++i) {
        const AllocEvent& e = ev[i];
        if (e.op != prof::EventKind::Oom && static_cast<int>(e.device) != device) {
          skipped = true;
          continue;
        }
        folded_any = true;
        st.apply(e);
        if (e.op == prof::EventKind::Alloc) label |= e.category;
        // A counter is a step function (counter_lod.hpp): an event that leaves a curve as it was
        // adds no sample to it (a free request leaves active, a completion allocated, most events
        // reserved), which halves what the curves hold.
        const double v[kLevelCurves] = {static_cast<double>(st.allocated), static_cast<double>(st.allocated + st.pending_free),
                                        static_cast<double>(st.reserved)};
        for (int k = 0; k < kLevelCurves; ++k)
          if (v[k] != last[k]) c[k]->add(e.t, last[k] = v[k]);
        // largest_free costs O(blocks): sample it at intervals that grow with the state, O(events) total.
        if (++d.since >= (st.block_count + st.segments.size()) / 4) {
          d.since = 0;
          sample_free(e.t);
        }
      }
    }
    if (with_free && d.since != 0 && folded_any) {  // the curve reaches the last event
      sample_free(ev.back().t);
      d.provisional = true;
    }
    for (int k = 0; k < n; ++k)
      if (c[k]) c[k]->update_levels(std::min(n0[k], c[k]->size()));
    if (fast && d.fold.broken())
      for (int k = 0; k < kLevelCurves; ++k)
        if (p.sampled_level[k]) set_source(k, false);
    label_known = fold_from <= from && !skipped;  // the fold saw every Alloc from `from` on
  }
  // Per-category allocated bytes ("cat:parameter", ...) when the trace labels blocks; frees find
  // their block's category by address (they may not carry it).
  std::size_t cat_from = from;
  if (!d.labelled) {
    if (label_known) d.labelled = label != 0;
    for (std::size_t i = from; i < ev.size() && !d.labelled && !label_known; ++i) d.labelled = ev[i].op == prof::EventKind::Alloc && ev[i].category != 0;
    if (d.labelled) cat_from = 0;  // the unlabelled blocks before count as "unknown"
  }
  if (d.labelled) {
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
      if (e.op == prof::EventKind::Alloc) {
        const std::uint8_t c = e.category < kMemCategoryCount ? e.category : 0;
        d.live[e.addr] = {c, e.size};
        d.bytes[c] += static_cast<double>(e.size);
        changed = c;
      } else if (e.op == prof::EventKind::FreeRequested || e.op == prof::EventKind::FreeCompleted) {
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
  if (added) sort_counters(rd);
  r.alloc_from[slot] = std::min(r.alloc_from[slot], from);
}

}  // namespace memcomm::view
