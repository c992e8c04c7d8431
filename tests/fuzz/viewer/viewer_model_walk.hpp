// What memcomm-view does with a loaded Timeline before drawing it (AppState::set_timeline): the
// indexes, then the allocator state at the start, middle and end (the Allocator pane's cursor).
#pragma once

#include <memcomm/view/indexes.hpp>
#include <memcomm/view/timeline.hpp>

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
}

}  // namespace memcomm_fuzz
