// Sorting events by time, exploiting how traces are already ordered.
//
// Note [Nearly sorted]
// Events come out of the recorder as sorted runs (one per thread per drain, merged by the
// collector) with small local disorder (spans recorded at their end, CUPTI buffers flushed late).
// sort_by_time first tries insertion with a move budget, which is O(n) for such input, and falls
// back to a stable merge sort when the disorder is large. A converted torch.profiler trace is
// instead a few long sorted runs (the file's events, then each thread's ranges, the collectives,
// the metadata): when one pass finds at most kFewRuns runs they are merged, O(n log runs) (on a
// 7.6 M-event trace of 5 runs 0.18 s, where insertion spent its budget and the merge sort after it
// took 1.15 s). All are stable: events with equal timestamps keep recording order (a RangeEnd
// stays before the RangeBegin that follows it).
#pragma once

#include <vector>

#include "memcomm/trace/event.hpp"

namespace memcomm::prof {

void sort_by_time(std::vector<Event>& events);
// Merges consecutive sorted runs [bounds[i], bounds[i+1]) of `events` in place (stable).
void merge_sorted_runs(std::vector<Event>& events, const std::vector<size_t>& bounds);

}  // namespace memcomm::prof
