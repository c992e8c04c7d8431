// The allocator-derived parts of TimelineBuilder::append_to(): expandable-segment marks, OOM
// markers, memory curves and per-category curves, continued from the state of the last append
// (Note [Incremental append] in timeline_append.cpp).
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
  // Memory curves derived from the events, when the trace has no sampled ones.
  if (!p.sampled_memory && !ev.empty()) {
    CounterSeries* c[5];
    for (int k = 0; k < 5; ++k) c[k] = &counter_for(rd, kDerivedMemory[k], k == 4 ? "" : "B", added);
    CounterSeries &allocated = *c[0], &active = *c[1], &reserved = *c[2], &largest = *c[3], &frag = *c[4];
    d.derived = true;
    if (from == 0) {
      for (auto* s : c) s->clear();
      d.state = AllocatorState{};
      d.since = 0;
      d.provisional = false;
    }
    if (d.provisional) {  // the last sample stood for "now": the new events continue from before it
      largest.truncate(largest.size() - 1);
      frag.truncate(frag.size() - 1);
      d.provisional = false;
    }
    std::size_t n0[5];
    for (int k = 0; k < 5; ++k) n0[k] = c[k]->size();
    AllocatorState& st = d.state;
    const auto sample_free = [&](TimeNs t) {
      const double lf = static_cast<double>(st.largest_free());
      const double free_bytes = static_cast<double>(st.reserved) - static_cast<double>(st.allocated + st.pending_free);
      largest.add(t, lf);
      frag.add(t, free_bytes > 0 ? 1.0 - lf / free_bytes : 0.0);
    };
    for (std::size_t i = from; i < ev.size(); ++i) {
      const AllocEvent& e = ev[i];
      st.apply(e);
      allocated.add(e.t, static_cast<double>(st.allocated));
      active.add(e.t, static_cast<double>(st.allocated + st.pending_free));
      reserved.add(e.t, static_cast<double>(st.reserved));
      // largest_free costs O(blocks): sample it at intervals that grow with the state, O(events) total.
      if (++d.since >= (st.block_count + st.segments.size()) / 4) {
        d.since = 0;
        sample_free(e.t);
      }
    }
    if (d.since != 0) {  // the curve reaches the last event
      sample_free(ev.back().t);
      d.provisional = true;
    }
    for (int k = 0; k < 5; ++k) c[k]->update_levels(std::min(n0[k], c[k]->size()));
  }
  // Per-category allocated bytes ("cat:parameter", ...) when the trace labels blocks; frees find
  // their block's category by address (they may not carry it).
  std::size_t cat_from = from;
  if (!d.labelled) {
    for (std::size_t i = from; i < ev.size() && !d.labelled; ++i) d.labelled = ev[i].op == AllocOp::Alloc && ev[i].category != 0;
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
