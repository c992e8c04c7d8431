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

// The curves derive_alloc() makes from allocator events (Note [Memory curves from block events] in
// trace/ allocator_fold.hpp): the first three where the fold of the rank's device is complete
// or the curve is not sampled, the last two when the trace samples no memory metric.
inline const char* const kDerivedMemory[] = {"allocated", "active", "reserved", "largest_free", "fragmentation"};
inline constexpr int kLevelCurves = 3;  // allocated, active, reserved: exact from the events
// Prefix of the sampled allocated/active/reserved series that block events supersede (kept, not drawn).
inline const std::string kSampledPrefix = "sampled:";
// "allocated", "active" or "reserved".
inline bool is_level_curve(const std::string& name) {
  for (int k = 0; k < kLevelCurves; ++k)
    if (name == kDerivedMemory[k]) return true;
  return false;
}

}  // namespace memcomm::view
