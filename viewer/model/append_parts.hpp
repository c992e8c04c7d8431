// Internal to timeline_append.cpp and alloc_derive.cpp: merges of new spans and samples into a
// published Timeline (Note [Incremental append] in timeline_append.cpp).
#pragma once

#include <memcomm/view/timeline.hpp>

#include <string>
#include <utility>
#include <vector>

namespace memcomm::view {

// Nested lanes (phases, NVTX): re-nests the spans from the earliest new start on.
void merge_nested(Lane& lane, SpanRow& fresh);
// Lanes that should not overlap (streams, collectives): first-fit, or a re-pack for late spans.
// A fresh lane may take `fresh`'s buffer. Returns the bounds of `fresh` (min start, max end).
std::pair<TimeNs, TimeNs> merge_packed(Lane& lane, SpanRow& fresh);
// The lane of (kind, stream) in rd, inserted at its place (phases, NVTX, streams, collectives).
Lane& lane_for(RankData& rd, LaneKind kind, std::uint32_t stream);
// The series named `name` in rd; `added` is set when it had to be made.
CounterSeries& counter_for(RankData& rd, const std::string& name, const std::string& unit, bool& added);
// Stable time order for samples that interleaved.
void sort_samples(CounterSeries& series);
// Appends `fresh` (sorted) to `dst`, merging late samples; empties `fresh` in place.
void merge_samples(CounterSeries& dst, CounterSeries& fresh);
void sort_counters(RankData& rd);  // by name: one order whatever the arrival order

// The curves derive_alloc() makes from allocator events when the trace samples none.
inline const char* const kDerivedMemory[] = {"allocated", "active", "reserved", "largest_free", "fragmentation"};

}  // namespace memcomm::view
