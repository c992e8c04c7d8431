// What memcomm-view does with a loaded Timeline before drawing it (AppState::set_timeline): the
// indexes, then the allocator state at the start, middle and end (the Allocator pane's cursor),
// and the allocations pane's work: the band layout of the whole range and of its first half, who
// holds memory at the peak and at the middle, and the tooltip of the first and last allocation.
#pragma once

#include <memcomm/view/allocation_layout.hpp>
#include <memcomm/view/allocation_tip.hpp>
#include <memcomm/view/indexes.hpp>
#include <memcomm/view/loader.hpp>
#include <memcomm/view/timeline.hpp>

#include <string>

namespace memcomm_fuzz {

inline void walk(const memcomm::view::Timeline& tl) {
  using namespace memcomm::view;
  TimelineIndexes ix = build_indexes(tl);
  const TimeNs mid = tl.begin + (tl.end - tl.begin) / 2;
  for (auto& a : ix.alloc) {
    for (TimeNs t : {tl.end, tl.begin, mid}) {
      const AllocatorState& s = a->seek(t);
      (void)s.largest_free();
    }
  }
  AllocationLayout layout;
  for (const RankData& rd : tl.ranks) {
    const memcomm::prof::LivePeak peak = memcomm::prof::peak_live(rd.allocations);
    for (TimeNs t1 : {tl.end + 1, mid + 1})
      layout_allocations(rd.allocations, rd.alloc_index, {tl.begin, t1, 64, static_cast<double>(peak.bytes) / 100 + 1}, layout);
    for (TimeNs t : {peak.t, mid}) (void)holders_at(rd, t);
    if (rd.allocations.list.empty()) continue;
    for (std::uint32_t i : {std::uint32_t{0}, static_cast<std::uint32_t>(rd.allocations.list.size() - 1)})
      (void)tip_text(allocation_tip(rd, i, true), tl.begin);
  }
}

// Loads `path` with `ingest` (ingest_trace, ingest_kineto) whole and then under a --range, which takes
// other paths through the same events (Note [Time range load]), and walks each model it gives.
template <class Ingest>
void load_and_walk(Ingest ingest, const std::string& path, memcomm::view::LoadOptions o) {
  for (const bool ranged : {false, true}) {
    if (ranged) o.range_lo_s = 0, o.range_hi_s = 1e-3;
    memcomm::view::Timeline tl;
    std::string error;
    if (ingest(path, tl, error, nullptr, o)) walk(tl);
  }
}

}  // namespace memcomm_fuzz
