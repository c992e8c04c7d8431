// Sorting events by time, exploiting how traces are already ordered.
//
// Note [Nearly sorted]
// Events come out of the recorder as sorted runs (one per thread per drain, merged by the
// collector) with small local disorder (spans recorded at their end, CUPTI buffers flushed late).
// sort_by_time first tries insertion with a move budget, which is O(n) for such input, and falls
// back to a stable merge sort when the disorder is large. Both are stable: events with equal
// timestamps keep recording order (a RangeEnd stays before the RangeBegin that follows it).
#pragma once

#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

void sort_by_time(std::vector<Event>& events);
// Merges consecutive sorted runs [bounds[i], bounds[i+1]) of `events` in place (stable).
void merge_sorted_runs(std::vector<Event>& events, const std::vector<size_t>& bounds);

}  // namespace memcomm::prof
