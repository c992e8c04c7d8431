// The allocator-derived parts of TimelineBuilder::append_to(): expandable-segment marks, OOM
// markers, memory curves and per-category curves, continued from the state of the last append
// (Note [Incremental append] in timeline_append.cpp).
//
// Note [Memory curves from block events]: a memcomm trace carries both the allocator's block
// events (every alloc, free request, free completion and segment change, with its size and time)
// and the trainer's periodic MemSample counters (every ~50 ms). The samples miss whatever rises and
// falls between two of them: on a real 2-rank CPU run the trainer's own peak allocated was
// 71313920 B, the fold of the block events gives exactly that, and the samples' maximum was
// 69919744 B; a step shorter than the sampling period had only the value carried in from before it
// (512 B for rank 1's first steps). So when a rank has block events (anything but an OOM), its
// "allocated", "active" and "reserved" curves are the fold of those events, and the step table's
// and the Summary's peaks follow (they read "allocated"). A rank that samples no memory
// (snapshots, fixtures) is folded through AllocatorState, as the allocator state view is, which
// also gives largest_free/fragmentation; a rank that samples memory (memcomm traces) is folded as
// running sums of the sizes the events carry (memcomm's profiler records a block's size on its
// frees; memcomm-trace report's memory_series sums the same way): the state fold's block-vector
// updates cost ~10% of a 10 M-event load, the sums ~1%. Both give the same curves on a complete
// trace (tests/viewer/test_memory_curves.cpp). The sampled series are kept as "sampled:allocated", ... (not drawn).
// Samples stay in charge of what the fold would pay O(blocks) per point for: "largest_free" and
// "fragmentation" are derived (at intervals) only for a rank that samples no memory metric at all
// (snapshots, fixtures; deriving them on a 10 M-event trace that samples only allocated/reserved
// cost ~20% of its load time); and of ranks with no block events (traces recorded without them). An event that leaves a curve unchanged adds no
// sample to it (a counter is a step function), so the curves cost ~2 samples per alloc/free pair.
// A trace that starts mid-run (a time-range load, a late attach) misses the blocks allocated before
// it, as the allocator state view does (Note [Time range load] in ingest_trace.hpp); the
// "sampled:" series still hold the absolute level there.
#include "append_parts.hpp"

#include <memcomm/view/builder.hpp>

#include <algorithm>
#include <iterator>

namespace memcomm::view {

void TimelineBuilder::derive_alloc(RankData& rd, RankParts& p, std::size_t from, AppendResult& r, std::uint32_t slot) {
  auto& ev = rd.alloc_events;
  AllocDerive& d = p.derive;
  // Note [Expandable segments]: mark each SegmentAlloc that a later SegmentMap lands in.
  // OOM markers are collected in the same pass (these arrays are a fifth of a trace: one pass).
  if (from == 0) d.open.clear();
  std::size_t refold = from;
  std::vector<TimeNs> ooms;
  for (std::size_t i = from; i < ev.size(); ++i) {
    AllocEvent& e = ev[i];
    if (e.op == AllocOp::Alloc || e.op == AllocOp::FreeRequested || e.op == AllocOp::FreeCompleted) continue;
    if (e.op == AllocOp::Oom) {
      ooms.push_back(e.t);
    } else if (e.op == AllocOp::SegmentAlloc && !(e.flags & kAllocExpandable)) {
      d.open[e.addr] = {e.size, i};
    } else if (e.op == AllocOp::SegmentFree) {
      d.open.erase(e.addr);
    } else if (e.op == AllocOp::SegmentMap) {
      auto it = d.open.upper_bound(e.addr);
      if (it != d.open.begin() && e.addr < std::prev(it)->first + std::prev(it)->second.first) {
        --it;
        ev[it->second.second].flags |= kAllocExpandable;
        refold = std::min(refold, it->second.second);
        d.open.erase(it);
      }
    }
  }
  if (refold < from) {  // a segment already folded turned out expandable
    from = 0;
    ooms.clear();
    for (std::size_t i = 0; i < ev.size(); ++i)
      if (ev[i].op == AllocOp::Oom) ooms.push_back(ev[i].t);
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
    const int n = with_free ? 5 : kLevelCurves;
    CounterSeries* c[5] = {};
    for (int k = 0; k < n; ++k) c[k] = &counter_for(rd, kDerivedMemory[k], k == 4 ? "" : "B", added);
    CounterSeries &allocated = *c[0], &active = *c[1], &reserved = *c[2];
    const bool fast = !with_free;  // no O(blocks) free curves to sample: the running sums suffice
    std::size_t fold_from = d.derived ? from : 0;  // the first fold starts at the first event
    if ((with_free && !d.free_derived) || fast != d.fast) fold_from = 0;
    d.derived = true;
    d.free_derived = with_free;
    d.fast = fast;
    if (fold_from == 0) {
      for (int k = 0; k < n; ++k) c[k]->clear();
      d.state = AllocatorState{};
      d.since = 0;
      d.provisional = false;
      std::fill(std::begin(d.sums), std::end(d.sums), 0);
      d.segments.clear();
    }
    if (d.provisional) {  // the last sample stood for "now": the new events continue from before it
      c[3]->truncate(c[3]->size() - 1);
      c[4]->truncate(c[4]->size() - 1);
      d.provisional = false;
    }
    std::size_t n0[5] = {};
    double last[kLevelCurves];
    for (int k = 0; k < n; ++k) n0[k] = c[k]->size();
    for (int k = 0; k < kLevelCurves; ++k) last[k] = c[k]->size() ? c[k]->value(c[k]->size() - 1) : -1.0;
    AllocatorState& st = d.state;
    const auto sample_free = [&](TimeNs t) {
      const double lf = static_cast<double>(st.largest_free());
      const double free_bytes = static_cast<double>(st.reserved) - static_cast<double>(st.allocated + st.pending_free);
      c[3]->add(t, lf);
      c[4]->add(t, free_bytes > 0 ? 1.0 - lf / free_bytes : 0.0);
    };
    if (fast) {  // the sizes the events carry, summed (memcomm's profiler records a block's size on its frees)
      std::int64_t* sum = d.sums;
      // Each op checks only the curves it can move (this loop runs once per allocator event of a
      // load, a fifth of a trace).
      const auto put = [&](int k, TimeNs t) {
        const double v = static_cast<double>(std::max<std::int64_t>(0, sum[k]));
        if (v != last[k]) c[k]->add(t, last[k] = v);
      };
      bool fresh = last[0] < 0 || last[1] < 0 || last[2] < 0;  // the curves start at the first event, as the state fold's do
      for (std::size_t i = fold_from; i < ev.size(); ++i) {
        const AllocEvent& e = ev[i];
        const auto sz = static_cast<std::int64_t>(e.size);
        switch (e.op) {
          case AllocOp::Alloc:
            label |= e.category;
            sum[0] += sz;
            sum[1] += sz;
            put(0, e.t);
            put(1, e.t);
            break;
          case AllocOp::FreeRequested:
            sum[0] -= sz;
            put(0, e.t);
            break;
          case AllocOp::FreeCompleted:
            sum[1] -= sz;
            put(1, e.t);
            break;
          case AllocOp::SegmentAlloc: {
            const bool expandable = (e.flags & kAllocExpandable) != 0;  // a virtual range: its maps count
            if (d.segments.emplace(e.addr, expandable).second && !expandable) sum[2] += sz;
            put(2, e.t);
            break;
          }
          case AllocOp::SegmentFree: {
            const auto it = d.segments.find(e.addr);
            if (it == d.segments.end()) break;  // unknown segment: AllocatorState ignores it too
            if (!it->second) sum[2] -= sz;
            d.segments.erase(it);
            put(2, e.t);
            break;
          }
          case AllocOp::SegmentMap:
            sum[2] += sz;
            put(2, e.t);
            break;
          case AllocOp::SegmentUnmap:
            sum[2] -= sz;
            put(2, e.t);
            break;
          case AllocOp::Oom:
            break;
        }
        if (fresh) {
          for (int k = 0; k < kLevelCurves; ++k) put(k, e.t);
          fresh = false;
        }
      }
    } else {  // through AllocatorState, as the allocator state view folds them (largest_free needs the blocks)
      for (std::size_t i = fold_from; i < ev.size(); ++i) {
        const AllocEvent& e = ev[i];
        st.apply(e);
        if (e.op == AllocOp::Alloc) label |= e.category;
        // A counter is a step function (counter_lod.hpp): an event that leaves a curve as it was
        // adds no sample to it (a free request leaves active, a completion allocated, most events
        // reserved), which halves what the curves hold.
        const double v[kLevelCurves] = {static_cast<double>(st.allocated), static_cast<double>(st.allocated + st.pending_free),
                                        static_cast<double>(st.reserved)};
        if (v[0] != last[0]) allocated.add(e.t, last[0] = v[0]);
        if (v[1] != last[1]) active.add(e.t, last[1] = v[1]);
        if (v[2] != last[2]) reserved.add(e.t, last[2] = v[2]);
        // largest_free costs O(blocks): sample it at intervals that grow with the state, O(events) total.
        if (++d.since >= (st.block_count + st.segments.size()) / 4) {
          d.since = 0;
          sample_free(e.t);
        }
      }
    }
    if (with_free && d.since != 0) {  // the curve reaches the last event
      sample_free(ev.back().t);
      d.provisional = true;
    }
    for (int k = 0; k < n; ++k) c[k]->update_levels(std::min(n0[k], c[k]->size()));
    label_known = fold_from <= from;
  }
  // Per-category allocated bytes ("cat:parameter", ...) when the trace labels blocks; frees find
  // their block's category by address (they may not carry it).
  std::size_t cat_from = from;
  if (!d.labelled) {
    if (label_known) d.labelled = label != 0;
    for (std::size_t i = from; i < ev.size() && !d.labelled && !label_known; ++i) d.labelled = ev[i].op == AllocOp::Alloc && ev[i].category != 0;
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
      if (e.op == AllocOp::Alloc) {
        const std::uint8_t c = e.category < kMemCategoryCount ? e.category : 0;
        d.live[e.addr] = {c, e.size};
        d.bytes[c] += static_cast<double>(e.size);
        changed = c;
      } else if (e.op == AllocOp::FreeRequested || e.op == AllocOp::FreeCompleted) {
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
